// `1.0e400 : f64` was read as +inf (exit 0).
"test.op"() {a = 1.0e400 : f64} : () -> ()
