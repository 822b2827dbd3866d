// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-select-conv-algo{batch_size=4 train_size=8 val_size=4 conv_algo=winograd_2x2_3x3},memplan-derive-shapes{batch_size=4 train_size=8 val_size=4},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-fuse-bn-stats' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-select-conv-algo{batch_size=4 train_size=8 val_size=4 conv_algo=winograd_2x2_3x3},memplan-derive-shapes{batch_size=4 train_size=8 val_size=4},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-fuse-bn-stats,memplan-fuse-bn-stats' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-select-conv-algo{batch_size=4 train_size=8 val_size=4 conv_algo=im2col},memplan-derive-shapes{batch_size=4 train_size=8 val_size=4},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-fuse-bn-stats' | filecheck %s --check-prefix=IM2COL
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-compile{batch_size=4 train_size=8 val_size=4 conv_algo=winograd_2x2_3x3}' | filecheck %s --check-prefix=COMPILE
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-compile{batch_size=4 train_size=8 val_size=4 conv_algo=winograd_2x2_3x3 fuse_bn_stats=false}' | filecheck %s --check-prefix=OFF
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=8 val_size=4},memplan-max-slots,memplan-create-plans,memplan-fuse-bn-stats' | filecheck %s --check-prefix=NOGRAPH
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=8 val_size=4},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-share-variants,memplan-build-atlas,memplan-fuse-bn-stats' | filecheck %s --check-prefix=ATLAS

// Every 3x3 conv runs Winograd F(2x2, 3x3) (forced). Four convs feed a batch norm in their own
// bucket: the first layer's cbr (BN+ReLU, 7 -> 9 inputs), the plain conv before bn2d (BN2D_FWD),
// the basic block's two convs (BN+ReLU, and BN+add+ReLU 8 -> 10 inputs). Each such conv gets the
// params entry 7, its own with bn_stats = true (one entry: the four convs' params are equal); the
// conv before a plain ReLU keeps entry 0. A second run changes nothing (RUN 2). Under im2col
// nothing fuses (RUN 3): the graph is the one without the pass. memplan-compile runs the pass by
// default (RUN 4), not with fuse_bn_stats=false (RUN 5).
// CHECK-LABEL: memplan.graph @train
// CHECK-SAME:    {algo = "winograd_2x2_3x3", bn_stats = true, groups = 1 : i64, k = 3 : i64, out_ch = 16 : i64, p = 1 : i64, s = 1 : i64}] {
// CHECK:         memplan.nodes first_layer_fwd_a ops = ["DTENSOR_COPY", "CONV_FP32_FWD", "BN2D_RELU_FP32_FWD"] ins = [0, 1, 23, 24, 30, 31, 35, 36, 21, 22, 28, 29] in_counts = [1, 2, 9] outs = [4, 24, 28, 29, {{.*}}] {{.*}} params = [-1, 7, 1]
// CHECK:         memplan.nodes deep_fwd_bwd ops = ["CONV_FP32_FWD", "BN2D_FP32_FWD", "RELU_FP32_FWD", "CONV_FP32_FWD", "RELU_FP32_FWD", "CONV_FP32_FWD", "BN2D_RELU_FP32_FWD", "CONV_FP32_FWD", "BN2D_ADD_RELU_FP32_FWD", {{.*}}] ins = [43, 50, 51, 58, 59, 63, 64, 21, 22, 55, 56, {{.*}}] in_counts = [2, 9, 1, 2, 1, 2, 9, 2, 10, {{.*}}] outs = [51, 55, 56, {{.*}}] {{.*}} params = [7, 1, -1, 0, -1, 7, 1, 7, 1, {{.*}}]
// The inference graph is not rewritten.
// CHECK-LABEL: memplan.graph @infer
// CHECK-NOT:     bn_stats
// CHECK-SAME:    {
// IM2COL-LABEL: memplan.graph @train
// IM2COL-NOT:    bn_stats
// IM2COL:        memplan.nodes first_layer_fwd_a {{.*}} in_counts = [1, 2, 7]
// IM2COL:        memplan.nodes deep_fwd_bwd {{.*}} in_counts = [2, 7, 1, 2, 1, 2, 7, 2, 8, {{.*}}] {{.*}} params = [0, 1, -1, 0, -1, 0, 1, 0, 1, {{.*}}]
// COMPILE-LABEL: memplan.graph @train
// COMPILE-SAME:    bn_stats = true
// COMPILE:         memplan.nodes deep_fwd_bwd {{.*}} in_counts = [2, 9, 1, 2, 1, 2, 9, 2, 10, {{.*}}]
// OFF-LABEL: memplan.graph @train
// OFF-NOT:     bn_stats
// OFF:         memplan.nodes deep_fwd_bwd {{.*}} in_counts = [2, 7, 1, 2, 1, 2, 7, 2, 8, {{.*}}]
// NOGRAPH: 'arch.model' op @pairs: memplan-fuse-bn-stats needs the program's @train graph; run memplan-build-graph first (or memplan-compile)
// ATLAS: 'arch.model' op @pairs: memplan-fuse-bn-stats runs before memplan-build-atlas
arch.model @pairs input(8, 8, 16) num_classes = 10 first_layer = 0 {
^bb0(%x: tensor<?x8x8x16xf32>):
  %0 = arch.cbr %x out_ch = 16 k = 3 p = 1 : tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  %1 = arch.conv %0 out_ch = 16 k = 3 p = 1 : tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  %2 = arch.bn2d %1 : tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  %3 = arch.relu %2 : tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  %4 = arch.conv %3 out_ch = 16 k = 3 p = 1 : tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  %5 = arch.relu %4 : tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  %6 = arch.basic_block_identity %5 out_ch = 16 : tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  %7 = arch.gap_fc %6 out_features = 10 : tensor<?x8x8x16xf32> -> tensor<?x1x1x10xf32>
  %8 = arch.softmax_ce %7 num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %8 : tensor<?x1x1x10xf32>
}

// -----

// A plain conv as the first layer: its BN forward is in the deep bucket, after the first layer's
// bucket, so it keeps its own statistics pass (the pass looks inside one bucket).
// CHECK-LABEL: memplan.graph @train
// CHECK-NOT:     bn_stats
// CHECK:         memplan.nodes first_layer_fwd_a ops = ["DTENSOR_COPY", "CONV_FP32_FWD"] {{.*}} params = [-1, 0]
// CHECK:         memplan.nodes deep_fwd_bwd ops = ["BN2D_FP32_FWD", {{.*}} in_counts = [7,
// NOGRAPH: 'arch.model' op @first: memplan-fuse-bn-stats needs the program's @train graph
// ATLAS: 'arch.model' op @first: memplan-fuse-bn-stats runs before memplan-build-atlas
arch.model @first input(8, 8, 16) num_classes = 10 first_layer = 0 {
^bb0(%x: tensor<?x8x8x16xf32>):
  %0 = arch.conv %x out_ch = 16 k = 3 p = 1 : tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  %1 = arch.bn2d %0 : tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  %2 = arch.relu %1 : tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  %3 = arch.gap_fc %2 out_features = 10 : tensor<?x8x8x16xf32> -> tensor<?x1x1x10xf32>
  %4 = arch.softmax_ce %3 num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %4 : tensor<?x1x1x10xf32>
}
