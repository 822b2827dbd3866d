// An integer type of absurd width: xDSL 0.74 computes `1 << width` for its value range
// (gigabytes of memory for this one) and appears to hang.
"test.op"() {a = 1 : i99999999999} : () -> ()
