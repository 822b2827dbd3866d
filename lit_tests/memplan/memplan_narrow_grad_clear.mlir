// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-narrow-grad-clear' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-narrow-grad-clear,memplan-narrow-grad-clear' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-build-graph' | filecheck %s --check-prefix=BEFORE
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-narrow-grad-clear' | filecheck %s --check-prefix=NOGRAPH
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-share-variants,memplan-build-atlas,memplan-narrow-grad-clear' | filecheck %s --check-prefix=ATLAS

// The MLP of memplan_build_graph.mlir: memplan-build-graph clears [G_BN_BIAS .. G_DEEP_CONV_FP16]
// (regions 24..33). Every gradient is overwritten by its one producer (FC_FP32_BWD's dw / db, the
// loss' loss / top1 / top5 in R_RESULT) before anything reads it, except the second FC's bias
// gradient: that FC has no bias, so its placeholder l3.fc_bias_grad (in G_FC_BIAS, 26) is never
// written, and the NaN check and the optimizer read it. The clear narrows to [26, 26]. A rerun of
// the pass keeps it (second RUN line).
// BEFORE-LABEL: memplan.graph @train
// BEFORE:         memplan.nodes zero_grad ops = ["RANGE_CLEAR"] {{.*}} out_ranges = [24, 33] out_range_counts = [1] params = [-1]
// CHECK-LABEL: memplan.graph @train
// CHECK:         memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [26, 26] out_range_counts = [1] params = [-1]
// NOGRAPH: 'arch.model' op @mlp: memplan-narrow-grad-clear needs the program's @train graph; run memplan-build-graph first (or memplan-compile)
// After the atlas, the pass would empty a bucket the atlas names: a diagnostic instead (fifth RUN line).
// ATLAS: 'arch.model' op @mlp: memplan-narrow-grad-clear runs before memplan-build-atlas
arch.model @mlp input(2, 2, 2) num_classes = 3 first_layer = 0 {
^bb0(%x: tensor<?x2x2x2xf32>):
  %0 = arch.flatten %x : tensor<?x2x2x2xf32> -> tensor<?x1x1x8xf32>
  %1 = arch.fc %0 out_features = 4 bias : tensor<?x1x1x8xf32> -> tensor<?x1x1x4xf32>
  %2 = arch.relu %1 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  %3 = arch.fc %2 out_features = 3 : tensor<?x1x1x4xf32> -> tensor<?x1x1x3xf32>
  %4 = arch.softmax_ce %3 num_classes = 3 : tensor<?x1x1x3xf32> -> tensor<?x1x1x3xf32>
  arch.output %4 : tensor<?x1x1x3xf32>
}

// -----

// Both FCs with a bias: every gradient's producer overwrites it, the clear goes and with it the
// zero_grad bucket (the atlas gives it no capture key).
// BEFORE-LABEL: memplan.graph @train
// BEFORE:         memplan.nodes zero_grad ops = ["RANGE_CLEAR"]
// CHECK-LABEL: memplan.graph @train
// CHECK-NOT:     zero_grad
// CHECK:       memplan.graph @infer
// NOGRAPH: 'arch.model' op @biases: memplan-narrow-grad-clear needs the program's @train graph
// ATLAS: 'arch.model' op @biases: memplan-narrow-grad-clear runs before memplan-build-atlas
arch.model @biases input(2, 2, 2) num_classes = 3 first_layer = 0 {
^bb0(%x: tensor<?x2x2x2xf32>):
  %0 = arch.flatten %x : tensor<?x2x2x2xf32> -> tensor<?x1x1x8xf32>
  %1 = arch.fc %0 out_features = 4 bias : tensor<?x1x1x8xf32> -> tensor<?x1x1x4xf32>
  %2 = arch.relu %1 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  %3 = arch.fc %2 out_features = 3 bias : tensor<?x1x1x4xf32> -> tensor<?x1x1x3xf32>
  %4 = arch.softmax_ce %3 num_classes = 3 : tensor<?x1x1x3xf32> -> tensor<?x1x1x3xf32>
  arch.output %4 : tensor<?x1x1x3xf32>
}

// -----

// AMP: the conv weight gradient is written in fp16 (G_FIRST_CONV_FP16) by the first layer's
// CONV_AMP_BWD_FIRST_LAYER, and the fp32 G_FIRST_CONV by the cast after it (a whole-span write);
// BN and FC gradients are overwritten by their backward kernels: no clear.
// BEFORE-LABEL: memplan.graph @train
// BEFORE:         memplan.nodes zero_grad ops = ["RANGE_CLEAR"]
// CHECK-LABEL: memplan.graph @train
// CHECK-NOT:     zero_grad
// CHECK:         memplan.nodes cast_first_grad_fp16_to_fp32 ops = ["RANGE_CAST_FP16_TO_FP32"]
// CHECK-NOT:     zero_grad
// CHECK:       memplan.graph @infer
// NOGRAPH: 'arch.model' op @amp: memplan-narrow-grad-clear needs the program's @train graph
// ATLAS: 'arch.model' op @amp: memplan-narrow-grad-clear runs before memplan-build-atlas
arch.model @amp input(4, 4, 4) num_classes = 8 amp first_layer = 0 {
^bb0(%x: tensor<?x4x4x4xf32>):
  %0 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.bn2d %0 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %2 = arch.relu %1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %3 = arch.gap_fc %2 out_features = 8 bias : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %4 = arch.softmax_ce %3 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %4 : tensor<?x1x1x8xf32>
}
