// The fused op of examples/plugins/conv_relu.py through the whole compiler: its descriptor composes
// the conv's and the ReLU's, so the graphs run the existing kernels; its YAML kind; its verifier.
// RUN: tr-opt --load-plugin %plugins/conv_relu.py %s -p 'tr-compile{fuse=true batch_size=4 train_size=8 val_size=8}' | filecheck %s
// RUN: tr-opt --load-plugin %plugins/conv_relu.py %s -p 'tr-compile{fuse=true batch_size=4 train_size=8 val_size=8}' | tr-opt --load-plugin %plugins/conv_relu.py -t memplan-summary | filecheck %s --check-prefix=SUMMARY
// RUN: tr-opt --load-plugin %plugins/conv_relu.py %s -p 'arch-plan{fuse=true}' -t archplan-yaml | filecheck %s --check-prefix=YAML
// RUN: not tr-opt --load-plugin %plugins/conv_relu.py %S/Inputs/conv_relu_bad.mlir 2>&1 | filecheck %s --check-prefix=BAD

// CHECK:     arch.conv_relu
// CHECK:     memplan.program
// CHECK-DAG: "l0.s0_conv_weight"
// CHECK-DAG: "l0.s1_relu_output"
// CHECK-DAG: CONV_FP32_FWD
// CHECK-DAG: RELU_FP32_FWD
// CHECK-DAG: RELU_FP32_BWD
// CHECK-DAG: CONV_FP32_BWD_FIRST_LAYER
// SUMMARY:   memplan.program for @m: target cpu
// YAML:      kind: ConvRelu
// YAML-NEXT: name: conv_relu
// BAD:       tr-opt: error: {{.*}}conv_relu_bad.mlir:{{[0-9]+}}:{{[0-9]+}}: 'arch.conv_relu' op
arch.model @m input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %c = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
  %r = arch.relu %c : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %g = arch.gap %r : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %f = arch.fc %g out_features = 10 bias : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %l = arch.softmax_ce %f num_classes = 10 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %l : tensor<?x?x?x?xf32>
}
