// `10^23 : index` was accepted (MLIR's index has 64 bits).
"test.op"() {a = 100000000000000000000000 : index} : () -> ()
