// Not a test (an input of ../conv_relu_compile.mlir): a conv_relu whose result type contradicts its rule.
arch.model @bad input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %c = arch.conv_relu %x out_ch = 8 k = 3 : tensor<?x8x8x3xf32> -> tensor<?x8x8x8xf32>
  arch.output %c : tensor<?x8x8x8xf32>
}
