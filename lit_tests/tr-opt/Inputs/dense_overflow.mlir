// `dense<[300]> : tensor<1xi8>` was an internal error without location.
"test.op"() {a = dense<[300]> : tensor<1xi8>} : () -> ()
