// An arch.conv with stride 0 (a verifier error).
arch.model @m input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %c = arch.conv %x out_ch = 8 k = 3 s = 0 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
  arch.output %c : tensor<?x?x?x?xf32>
}
