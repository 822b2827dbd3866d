// 1e39 does not fit in f32: xDSL 0.74 raises OverflowError while packing it.
"test.op"() {a = 1.0e39 : f32} : () -> ()
