// A model in tree form (arch.seq): passes after arch-expand reject it at the seq.
arch.model @m input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %s = arch.seq %x : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32> {
  ^bb0(%i: tensor<?x8x8x3xf32>):
    arch.yield %i : tensor<?x8x8x3xf32>
  }
  arch.output %s : tensor<?x?x?x?xf32>
}
