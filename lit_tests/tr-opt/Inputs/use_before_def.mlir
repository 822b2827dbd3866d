// %c is used by the relu before the conv defines it: xDSL 0.74 accepts this.
arch.model @m input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %r = arch.relu %c : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %c = arch.conv %x out_ch = 8 k = 3 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
  arch.output %r : tensor<?x?x?x?xf32>
}
