// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-select-conv-algo{batch_size=4 train_size=8 val_size=4 conv_algo=winograd_2x2_3x3},memplan-derive-shapes{batch_size=4 train_size=8 val_size=4},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-fuse-grad-acc' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-select-conv-algo{batch_size=4 train_size=8 val_size=4 conv_algo=winograd_2x2_3x3},memplan-derive-shapes{batch_size=4 train_size=8 val_size=4},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-fuse-grad-acc,memplan-fuse-grad-acc' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-select-conv-algo{batch_size=4 train_size=8 val_size=4 conv_algo=im2col},memplan-derive-shapes{batch_size=4 train_size=8 val_size=4},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-fuse-grad-acc' | filecheck %s --check-prefix=IM2COL
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-compile{batch_size=4 train_size=8 val_size=4 conv_algo=winograd_2x2_3x3}' | filecheck %s --check-prefix=COMPILE
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-compile{batch_size=4 train_size=8 val_size=4 conv_algo=winograd_2x2_3x3 fuse_grad_acc=false}' | filecheck %s --check-prefix=OFF
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=8 val_size=4},memplan-max-slots,memplan-create-plans,memplan-fuse-grad-acc' | filecheck %s --check-prefix=NOGRAPH
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=8 val_size=4},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-share-variants,memplan-build-atlas,memplan-fuse-grad-acc' | filecheck %s --check-prefix=ATLAS

// Two identity blocks, every 3x3 conv Winograd F(2x2, 3x3) (forced). At each residual join the
// main path's first conv writes the block input's gradient (94 in the second block, 46 in the
// first) and a GRAD_ACCUM_FP32 then adds the skip's (143, 92), which the join's BN+add+ReLU
// backward wrote. The pass makes that backward write the skip gradient into the conv's dx (143
// -> 94, 92 -> 46), gives the conv its dx as a fourth input (dx_acc: 3 -> 4 inputs) and drops
// the GRAD_ACCUM: 24 nodes -> 22. A second run changes nothing (RUN 2). Under im2col nothing
// fuses (RUN 3). memplan-compile runs the pass by default (RUN 4), not with fuse_grad_acc=false
// (RUN 5).
// CHECK-LABEL: memplan.graph @train
// CHECK:         memplan.nodes deep_fwd_bwd ops = [{{.*}}"GAP_FP32_BWD", "BN2D_ADD_RELU_FP32_BWD", "CONV_FP32_BWD", "BN2D_RELU_FP32_BWD_FROM_OUTPUT", "CONV_FP32_BWD", "BN2D_ADD_RELU_FP32_BWD_FROM_OUTPUT", "CONV_FP32_BWD", "BN2D_RELU_FP32_BWD_FROM_OUTPUT", "CONV_FP32_BWD"]
// CHECK-SAME:    ins = [{{.*}}, 153, 152, 152, 144, 145, 130, 141, 142, 124, 124, 123, 121, 122, 121, 108, 119, 120, 102, 102, 101, 93, 94, 94, 93, 79, 90, 91, 73, 73, 72, 70, 71, 70, 57, 68, 69, 51, 51, 50, 43, 46]
// CHECK-SAME:    in_counts = [2, 7, 2, 8, 2, 7, 2, 8, 1, 3, 5, 5, 3, 1, 6, 3, 6, 4, 6, 3, 6, 4]
// CHECK-SAME:    outs = [{{.*}}, 162, 152, 156, 157, 144, 124, 94, 137, 138, 122, 125, 44, 45, 102, 115, 116, 94, 103, 44, 45, 73, 46, 86, 87, 71, 74, 44, 45, 51, 64, 65, 46, 52, 44, 45]
// The inference graph has no backward.
// CHECK-LABEL: memplan.graph @infer
// CHECK-NOT:     GRAD_ACCUM
// IM2COL-LABEL: memplan.graph @train
// IM2COL:        memplan.nodes deep_fwd_bwd {{.*}} "CONV_FP32_BWD", "GRAD_ACCUM_FP32", {{.*}} "CONV_FP32_BWD", "GRAD_ACCUM_FP32"]
// IM2COL-SAME:   in_counts = [2, 7, 2, 8, 2, 7, 2, 8, 1, 3, 5, 5, 3, 1, 6, 3, 6, 3, 2, 6, 3, 6, 3, 2]
// COMPILE-LABEL: memplan.graph @train
// COMPILE-NOT:     GRAD_ACCUM
// COMPILE:         memplan.nodes deep_fwd_bwd {{.*}} in_counts = [2, 9, 2, 10, 2, 9, 2, 10, 1, 3, 5, 5, 3, 1, 6, 3, 6, 4, 6, 3, 6, 4]
// OFF-LABEL: memplan.graph @train
// OFF:         memplan.nodes deep_fwd_bwd {{.*}} "CONV_FP32_BWD", "GRAD_ACCUM_FP32", {{.*}} "CONV_FP32_BWD", "GRAD_ACCUM_FP32"]
// NOGRAPH: 'arch.model' op @join: memplan-fuse-grad-acc needs the program's @train graph; run memplan-build-graph first (or memplan-compile)
// ATLAS: 'arch.model' op @join: memplan-fuse-grad-acc runs before memplan-build-atlas
arch.model @join input(8, 8, 16) num_classes = 10 first_layer = 0 {
^bb0(%x: tensor<?x8x8x16xf32>):
  %0 = arch.cbr %x out_ch = 16 k = 3 p = 1 : tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  %1 = arch.basic_block_identity %0 out_ch = 16 : tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  %2 = arch.basic_block_identity %1 out_ch = 16 : tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  %3 = arch.gap_fc %2 out_features = 10 : tensor<?x8x8x16xf32> -> tensor<?x1x1x10xf32>
  %4 = arch.softmax_ce %3 num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %4 : tensor<?x1x1x10xf32>
}

// -----

// A projection block (stride 2): its join's GRAD_ACCUM adds the 1x1 shortcut conv's input
// gradient to that of the main path's 3x3 stride-2 conv, which is not Winograd (direct here, im2col
// at larger sizes): nothing fuses, whatever conv_algo says (stride 2 has no Winograd).
// CHECK-LABEL: memplan.graph @train
// CHECK:         memplan.nodes deep_fwd_bwd ops = [{{.*}}"BN2D_RELU_FP32_BWD_FROM_OUTPUT", "CONV_FP32_BWD", "GRAD_ACCUM_FP32"]
// CHECK-SAME:    in_counts = [2, 7, 2, 7, 2, 8, 1, 3, 5, 5, 3, 1, 6, 5, 3, 3, 6, 3, 2]
// IM2COL-LABEL: memplan.graph @train
// IM2COL:        memplan.nodes deep_fwd_bwd {{.*}} "CONV_FP32_BWD", "GRAD_ACCUM_FP32"]
// COMPILE-LABEL: memplan.graph @train
// COMPILE:         memplan.nodes deep_fwd_bwd {{.*}} "CONV_FP32_BWD", "GRAD_ACCUM_FP32"]
// OFF-LABEL: memplan.graph @train
// OFF:         memplan.nodes deep_fwd_bwd {{.*}} "CONV_FP32_BWD", "GRAD_ACCUM_FP32"]
// NOGRAPH: 'arch.model' op @proj: memplan-fuse-grad-acc needs the program's @train graph
// ATLAS: 'arch.model' op @proj: memplan-fuse-grad-acc runs before memplan-build-atlas
arch.model @proj input(8, 8, 8) num_classes = 10 first_layer = 0 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %0 = arch.cbr %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %1 = arch.basic_block_projection %0 out_ch = 16 stride = 2 : tensor<?x8x8x8xf32> -> tensor<?x4x4x16xf32>
  %2 = arch.gap_fc %1 out_features = 10 : tensor<?x4x4x16xf32> -> tensor<?x1x1x10xf32>
  %3 = arch.softmax_ce %2 num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %3 : tensor<?x1x1x10xf32>
}
