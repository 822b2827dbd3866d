// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-fuse-fc-relu' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-fuse-fc-relu,memplan-fuse-fc-relu' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-build-graph' | filecheck %s --check-prefix=BEFORE
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-compile{batch_size=4 train_size=10 val_size=6 fuse_fc_relu=false}' | filecheck %s --check-prefix=OFF
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-fuse-fc-relu' | filecheck %s --check-prefix=NOGRAPH
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-share-variants,memplan-build-atlas,memplan-fuse-fc-relu' | filecheck %s --check-prefix=ATLAS

// The seed's MLP shape: fc -> relu -> fc. The forward pair FC (ins x 23, w 24, b 25; out 26)
// then RELU (26 -> 33) becomes FC_RELU (23, 24, 25 -> 33): 26's forward value had no other
// reader. The backward pair FC_BWD (dy 44, w 35, x 33 -> g 34, dw 38, db 39) then
// RELU_BWD_FROM_OUTPUT (34 and y = 33, the FC's own input -> 26) becomes RELU_FC_BWD
// (44, 35, 33 -> 26, 38, 39): 34 is no longer written. A second run changes nothing (RUN 2);
// memplan-compile with fuse_fc_relu=false keeps the pairs (RUN 4).
// BEFORE-LABEL: memplan.graph @train
// BEFORE:         memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD", "RELU_FP32_FWD", "FC_FP32_FWD", "SOFTMAX_CE_FP32_FWD", "SOFTMAX_CE_FP32_BWD", "FC_FP32_BWD", "RELU_FP32_BWD_FROM_OUTPUT", "FC_FP32_BWD"] ins = [23, 24, 25, 26, 33, 35, 36, {{.*}}, 44, 35, 33, 34, 33, 26, 24, 23] in_counts = [3, 1, 3, 5, 5, 3, 2, 3] outs = [26, 33, 37, {{.*}}, 34, 38, 39, 26, 23, 27, 28] out_counts = [1, 1, 1, 9, 1, 3, 1, 3]
// CHECK-LABEL: memplan.graph @train
// CHECK:         memplan.nodes deep_fwd_bwd ops = ["FC_RELU_FP32_FWD", "FC_FP32_FWD", "SOFTMAX_CE_FP32_FWD", "SOFTMAX_CE_FP32_BWD", "RELU_FC_FP32_BWD", "FC_FP32_BWD"] ins = [23, 24, 25, 33, 35, 36, {{.*}}, 44, 35, 33, 26, 24, 23] in_counts = [3, 3, 5, 5, 3, 3] outs = [33, 37, {{.*}}, 26, 38, 39, 23, 27, 28] out_counts = [1, 1, 9, 1, 3, 3] {{.*}} params = [1, 2, 3, 3, 2, 1]
// The inference graph keeps its FC and RELU_INF.
// CHECK-LABEL: memplan.graph @infer
// CHECK:         ops = ["DTENSOR_COPY", "FLATTEN_FP32_FWD", "FC_FP32_FWD", "RELU_FP32_INF", "FC_FP32_FWD", "SOFTMAX_CE_FP32_INF"]
// OFF-LABEL: memplan.graph @train
// OFF:         memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD", "RELU_FP32_FWD", "FC_FP32_FWD", "SOFTMAX_CE_FP32_FWD", "SOFTMAX_CE_FP32_BWD", "FC_FP32_BWD", "RELU_FP32_BWD_FROM_OUTPUT", "FC_FP32_BWD"]
// NOGRAPH: 'arch.model' op @mlp: memplan-fuse-fc-relu needs the program's @train graph; run memplan-build-graph first (or memplan-compile)
// ATLAS: 'arch.model' op @mlp: memplan-fuse-fc-relu runs before memplan-build-atlas
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

// The first FC's output also feeds the residual add (through the identity), after the ReLU read
// it: the forward pair stays. The ReLU's backward into the second FC fuses (the join's gradient
// is then accumulated into the first FC's output gradient as before).
// BEFORE-LABEL: memplan.graph @train
// BEFORE:         ops = ["FC_FP32_FWD", "RELU_FP32_FWD", "FC_FP32_FWD", "IDENTITY_FP32_FWD", "ADD_FP32_FWD", "FC_FP32_FWD", "SOFTMAX_CE_FP32_FWD", "SOFTMAX_CE_FP32_BWD", "FC_FP32_BWD", "ADD_FP32_BWD", "IDENTITY_FP32_BWD", "FC_FP32_BWD", "RELU_FP32_BWD_FROM_OUTPUT", "GRAD_ACCUM_FP32", "FC_FP32_BWD"]
// CHECK-LABEL: memplan.graph @train
// CHECK:         ops = ["FC_FP32_FWD", "RELU_FP32_FWD", "FC_FP32_FWD", "IDENTITY_FP32_FWD", "ADD_FP32_FWD", "FC_FP32_FWD", "SOFTMAX_CE_FP32_FWD", "SOFTMAX_CE_FP32_BWD", "FC_FP32_BWD", "ADD_FP32_BWD", "IDENTITY_FP32_BWD", "RELU_FC_FP32_BWD", "GRAD_ACCUM_FP32", "FC_FP32_BWD"]
// OFF-LABEL: memplan.graph @train
// OFF-NOT:       RELU_FC
// NOGRAPH: 'arch.model' op @reread: memplan-fuse-fc-relu needs the program's @train graph
// ATLAS: 'arch.model' op @reread: memplan-fuse-fc-relu runs before memplan-build-atlas
arch.model @reread input(2, 2, 3) num_classes = 10 first_layer = 0 {
^bb0(%x: tensor<?x2x2x3xf32>):
  %0 = arch.flatten %x : tensor<?x2x2x3xf32> -> tensor<?x1x1x12xf32>
  %1 = arch.fc %0 out_features = 8 bias : tensor<?x1x1x12xf32> -> tensor<?x1x1x8xf32>
  %2 = arch.relu %1 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %3 = arch.fc %2 out_features = 8 bias : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %4 = arch.identity %1 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %5 = arch.add %4, %3 : tensor<?x1x1x8xf32>, tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %6 = arch.fc %5 out_features = 10 bias : tensor<?x1x1x8xf32> -> tensor<?x1x1x10xf32>
  %7 = arch.softmax_ce %6 num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %7 : tensor<?x1x1x10xf32>
}

// -----

// A ReLU in the mask form (it feeds an add, which keeps nothing for its backward) has no fused
// kernel: the FC before it and the ReLU backward stay.
// CHECK-LABEL: memplan.graph @train
// CHECK:         ops = ["FC_FP32_FWD", "RELU_FP32_FWD", "IDENTITY_FP32_FWD", "ADD_FP32_FWD", "FC_FP32_FWD", "SOFTMAX_CE_FP32_FWD", "SOFTMAX_CE_FP32_BWD", "FC_FP32_BWD", "ADD_FP32_BWD", "IDENTITY_FP32_BWD", "RELU_FP32_BWD", "GRAD_ACCUM_FP32", "FC_FP32_BWD"]
// OFF-LABEL: memplan.graph @train
// NOGRAPH: 'arch.model' op @mask_form: memplan-fuse-fc-relu needs the program's @train graph
// ATLAS: 'arch.model' op @mask_form: memplan-fuse-fc-relu runs before memplan-build-atlas
arch.model @mask_form input(2, 2, 3) num_classes = 10 first_layer = 0 {
^bb0(%x: tensor<?x2x2x3xf32>):
  %0 = arch.flatten %x : tensor<?x2x2x3xf32> -> tensor<?x1x1x12xf32>
  %1 = arch.fc %0 out_features = 8 bias : tensor<?x1x1x12xf32> -> tensor<?x1x1x8xf32>
  %2 = arch.relu %1 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %3 = arch.identity %1 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %4 = arch.add %3, %2 : tensor<?x1x1x8xf32>, tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %5 = arch.fc %4 out_features = 10 bias : tensor<?x1x1x8xf32> -> tensor<?x1x1x10xf32>
  %6 = arch.softmax_ce %5 num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %6 : tensor<?x1x1x10xf32>
}
