// Numeric literals their type cannot hold: each is a parse error at the literal (xDSL 0.74 made
// `1.0e400 : f64` and `1.0e39 : bf16` infinite, kept `10^23 : index`, and reported
// `dense<[300]> : tensor<1xi8>` as an internal error without location). In-range neighbours
// still parse. With --parsing-diagnostics every chunk's error goes to stdout.
// RUN: tr-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// The issue's three inputs through the CLI: `tr-opt: error:` at file:line:col, exit 1.
// RUN: not tr-opt %S/Inputs/f64_overflow.mlir 2>&1 | filecheck %s --check-prefix=F64
// F64:      tr-opt: error: {{.*}}f64_overflow.mlir:2:18: float literal 1.0e400 is out of range: its magnitude is above the largest finite f64 (1.7976931348623157e+308), the widest float tr-opt can hold
// F64-NEXT: "test.op"() {a = 1.0e400 : f64} : () -> ()
// F64-NEXT: {{^                 \^\^\^\^\^\^\^$}}
// F64-NOT:  Traceback
// RUN: not tr-opt %S/Inputs/index_overflow.mlir 2>&1 | filecheck %s --check-prefix=INDEX
// INDEX:     tr-opt: error: {{.*}}index_overflow.mlir:2:18: numeric literal out of range for its type: '100000000000000000000000 : index' (index holds -9223372036854775808 to 9223372036854775807)
// INDEX-NOT: Traceback
// RUN: not tr-opt %S/Inputs/dense_overflow.mlir 2>&1 | filecheck %s --check-prefix=DENSE
// DENSE:     tr-opt: error: {{.*}}dense_overflow.mlir:2:25: value 300 is out of range for the element type i8 of the dense literal (i8 holds -128 to 255)
// DENSE-NOT: internal error
// DENSE-NOT: Traceback

// CHECK: {{.*}}literals.mlir:[[# @LINE + 2]]:18
// CHECK: float literal 1.0e400 is out of range: its magnitude is above the largest finite f64
"test.op"() {a = 1.0e400 : f64} : () -> ()

// -----

// CHECK: {{.*}}literals.mlir:[[# @LINE + 2]]:19
// CHECK: float literal 1.0e400 is out of range
"test.op"() {a = -1.0e400 : f64} : () -> ()

// -----

// Without a type (f64) and for f80, which xDSL holds as a Python float too.
// CHECK: float literal 2.5e999 is out of range
"test.op"() {a = 2.5e999} : () -> ()

// -----

// CHECK: float literal 1.0e400 is out of range
"test.op"() {a = 1.0e400 : f80} : () -> ()

// -----

// xDSL 0.74 can neither store nor print an f80 or f128 value (an internal error when printing
// `1.5 : f80`, when parsing a dense literal or array of them): a parse error at the literal.
// CHECK: {{.*}}literals.mlir:[[# @LINE + 3]]:18
// CHECK: cannot hold '1.5 : f80': f80 values are not supported (xDSL 0.74 can neither store nor print them); use f64
// CHECK-NOT: internal error
"test.op"() {a = 1.5 : f80} : () -> ()

// -----

// CHECK: cannot hold this dense array: f128 values are not supported
"test.op"() {a = array<f128: 1.0>} : () -> ()

// -----

// CHECK: {{.*}}literals.mlir:[[# @LINE + 2]]:18
// CHECK: numeric literal out of range for its type: '1.0e39 : f32'
"test.op"() {a = 1.0e39 : f32} : () -> ()

// -----

// CHECK: numeric literal out of range for its type: '1.0e39 : bf16' (it is above the largest finite bf16)
"test.op"() {a = 1.0e39 : bf16} : () -> ()

// -----

// CHECK: numeric literal out of range for its type: '1.0e39 : tf32' (it is above the largest finite tf32)
"test.op"() {a = 1.0e39 : tf32} : () -> ()

// -----

// CHECK: numeric literal out of range for its type: '-1.0 : f8E8M0FNU' (f8E8M0FNU does not support signed values)
"test.op"() {a = -1.0 : f8E8M0FNU} : () -> ()

// -----

// MLIR's index is a signed 64-bit integer: 2^63 - 1 and -2^63 are the ends.
// CHECK: {{.*}}literals.mlir:[[# @LINE + 2]]:18
// CHECK: numeric literal out of range for its type: '9223372036854775808 : index' (index holds -9223372036854775808 to 9223372036854775807)
"test.op"() {a = 9223372036854775808 : index} : () -> ()

// -----

// CHECK: numeric literal out of range for its type: '-9223372036854775809 : index'
"test.op"() {a = -9223372036854775809 : index} : () -> ()

// -----

// CHECK: numeric literal out of range for its type: '100000000000000000000000 : index'
%0 = arith.constant 100000000000000000000000 : index

// -----

// Integer types keep xDSL's ranges (signless: the signed and the unsigned values); xDSL's
// error had no source line and pointed after the type (and escaped --parsing-diagnostics).
// CHECK: {{.*}}literals.mlir:[[# @LINE + 2]]:18
// CHECK: numeric literal out of range for its type: '100000000000000000000000 : i64' (i64 holds -9223372036854775808 to 18446744073709551615)
"test.op"() {a = 100000000000000000000000 : i64} : () -> ()

// -----

// CHECK: numeric literal out of range for its type: '-1 : ui8' (ui8 holds 0 to 255)
"test.op"() {a = -1 : ui8} : () -> ()

// -----

// Inside an array attribute.
// CHECK: {{.*}}literals.mlir:[[# @LINE + 2]]:31
// CHECK: numeric literal out of range for its type: '300 : i8' (i8 holds -128 to 255)
"test.op"() {a = 1 : i8, b = [300 : i8]} : () -> ()

// -----

// A hexadecimal float is a bit pattern of the type's width.
// CHECK: numeric literal out of range for its type: '0x1FFFF : bf16' (a hexadecimal bf16 is a pattern of 16 bits)
"test.op"() {a = 0x1FFFF : bf16} : () -> ()

// -----

// Dense literals: the error is at the element.
// CHECK: {{.*}}literals.mlir:[[# @LINE + 2]]:28
// CHECK: value 300 is out of range for the element type i8 of the dense literal (i8 holds -128 to 255)
"test.op"() {a = dense<[1, 300]> : tensor<2xi8>} : () -> ()

// -----

// A splat.
// CHECK: value -129 is out of range for the element type i8 of the dense literal
"test.op"() {a = dense<-129> : tensor<4xi8>} : () -> ()

// -----

// CHECK: value 128 is out of range for the element type si8 of the dense literal (si8 holds -128 to 127)
"test.op"() {a = dense<[128]> : tensor<1xsi8>} : () -> ()

// -----

// CHECK: value 100000000000000000000000 is out of range for the element type index of the dense literal (index holds -9223372036854775808 to 9223372036854775807)
"test.op"() {a = dense<[100000000000000000000000]> : tensor<1xindex>} : () -> ()

// -----

// CHECK: value (300, 1) is out of range for the element type complex<i8> of the dense literal (i8 holds -128 to 255)
"test.op"() {a = dense<(300, 1)> : tensor<complex<i8>>} : () -> ()

// -----

// CHECK: value 1.0e39 is out of range for the element type f32 of the dense literal (it is above the largest finite f32)
"test.op"() {a = dense<[1.0, 1.0e39]> : tensor<2xf32>} : () -> ()

// -----

// CHECK: value 7.0e4 is out of range for the element type f16 of the dense literal (it is above the largest finite f16)
"test.op"() {a = dense<7.0e4> : tensor<2xf16>} : () -> ()

// -----

// CHECK: value 1.0e39 is out of range for the element type bf16 of the dense literal
"test.op"() {a = dense<[1.0e39]> : tensor<1xbf16>} : () -> ()

// -----

// An integer too large for any float.
// CHECK: is out of range for the element type f64 of the dense literal (it is above the largest finite f64, the widest float tr-opt can hold)
"test.op"() {a = dense<[1000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000]> : tensor<1xf64>} : () -> ()

// -----

// CHECK: float literal 1.0e400 is out of range
"test.op"() {a = dense<[1.0e400]> : tensor<1xf64>} : () -> ()

// -----

// Dense arrays: the error spans the attribute.
// CHECK: {{.*}}literals.mlir:[[# @LINE + 2]]:23
// CHECK: value out of range for the element type of this dense array (a value is above the largest finite f32)
"test.op"() {a = array<f32: 1.0, 1.0e39>} : () -> ()

// -----

// CHECK: value out of range for the element type of this dense array (a value is above the largest finite bf16)
"test.op"() {a = array<bf16: 1.0e39>} : () -> ()

// -----

// CHECK: float literal 1.0e400 is out of range
"test.op"() {a = array<f64: 1.0e400>} : () -> ()

// -----

// In an op's custom format (the f64 properties of arch ops).
// CHECK: {{.*}}literals.mlir:[[# @LINE + 4]]:27
// CHECK: float literal 1.0e400 is out of range
arch.model @m input(4, 4, 3) num_classes = 3 {
^bb0(%x: tensor<?x4x4x3xf32>):
  %0 = arch.bn2d %x eps = 1.0e400 : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  arch.output %0 : tensor<?x4x4x3xf32>
}

// -----

// In range: the largest values, underflow to 0, infinity as a hexadecimal bit pattern.
// CHECK:      "test.op"() {a = 9223372036854775807 : index, b = -9223372036854775808 : index, c = 0.000000e+00 : f64, d = 0x7ff0000000000000 : f64, e = 0x7f80 : bf16, f = 6.550400e+04 : f16, g = 1.7976931348623157e+308 : f64}
// CHECK-NEXT: "test.op"() {a = dense<[127, -128, -1]> : tensor<3xi8>, b = dense<[9223372036854775807, -9223372036854775808]> : tensor<2xindex>, c = dense<3.389530e+38> : tensor<2xbf16>, d = array<f32: 3.40282347e+38>}
"test.op"() {a = 9223372036854775807 : index, b = -9223372036854775808 : index, c = 1.0e-400 : f64, d = 0x7ff0000000000000 : f64, e = 0x7f80 : bf16, f = 65504.0 : f16, g = 1.7976931348623157e308 : f64} : () -> ()
"test.op"() {a = dense<[127, -128, 255]> : tensor<3xi8>, b = dense<[9223372036854775807, -9223372036854775808]> : tensor<2xindex>, c = dense<3.3895313892515355e38> : tensor<2xbf16>, d = array<f32: 3.4028234663852886e38>} : () -> ()
