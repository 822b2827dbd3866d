// Syntax errors of the arch custom formats: parse errors, not verifier errors. With
// --parsing-diagnostics each chunk prints its parse error (file:line:col, the source line,
// carets, the message) and the run exits 0, so every chunk CHECKs its message.
// RUN: tr-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// An unknown block style is rejected by the enum attribute's parser.
%x = "test.op"() : () -> tensor<?x8x8x16xf32>
%b = arch.block %x resnet_9_9 out_ch = 16 : tensor<?x8x8x16xf32> -> tensor<?x?x?x?xf32>
// CHECK:      invalid_syntax.mlir:8:20
// CHECK-NEXT: %b = arch.block %x resnet_9_9 out_ch = 16
// CHECK-NEXT: ^^^^^^^^^^
// CHECK-NEXT: Expected `resnet_1_3_1`, `resnet_1_3_1_ds`, `resnet_3_3`, `resnet_3_3_ds`, `mb_e1_k3`, `mb_e1_k3_ds`, `mb_e6_k3`, or `mb_e6_k3_ds`.

// -----

"test.op"() {style = #arch<block_style resnet_2>} : () -> ()
// CHECK: invalid_syntax.mlir:16:40
// CHECK: Expected `resnet_1_3_1`, `resnet_1_3_1_ds`, `resnet_3_3`, `resnet_3_3_ds`, `mb_e1_k3`, `mb_e1_k3_ds`, `mb_e6_k3`, or `mb_e6_k3_ds`.

// -----

// A required property is missing.
%x = "test.op"() : () -> tensor<?x8x8x16xf32>
%c = arch.conv %x k = 3 : tensor<?x8x8x16xf32> -> tensor<?x?x?x?xf32>
// CHECK: invalid_syntax.mlir:24:19
// CHECK: Expected 'out_ch'

// -----

// Integer properties take integer literals.
%x = "test.op"() : () -> tensor<?x8x8x16xf32>
%c = arch.conv %x out_ch = 8 k = 3 s = 1.5 : tensor<?x8x8x16xf32> -> tensor<?x?x?x?xf32>
// CHECK: invalid_syntax.mlir:32:40
// CHECK: Expected integer literal

// -----

// Layer ops spell both types.
%x = "test.op"() : () -> tensor<?x8x8x16xf32>
%r = arch.relu %x : tensor<?x8x8x16xf32>
// CHECK: Expected '->'

// -----

// The model input is (H, W, C).
arch.model @m input(8, 8) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  arch.output %x : tensor<?x8x8x3xf32>
}
// CHECK: invalid_syntax.mlir:46:25
// CHECK: Expected ','

// -----

// arch.add2 names its regions.
%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%r = arch.add2 %x : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32> {
^bb0(%s: tensor<?x8x8x3xf32>):
  arch.yield %s : tensor<?x8x8x3xf32>
}
// CHECK: Expected 'shortcut'

// -----

// A valid last chunk: the run reaches it.
// CHECK: arch.model @valid
arch.model @valid input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  arch.output %x : tensor<?x8x8x3xf32>
}
