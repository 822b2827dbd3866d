// A model whose region is never closed (the input ends inside it).
arch.model @m input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %r = arch.relu %x : tensor<?x8x8x3xf32> -> tensor<?x8x8x3xf32>
  arch.output %r : tensor<?x8x8x3xf32>
