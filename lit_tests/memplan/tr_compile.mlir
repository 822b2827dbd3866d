// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'tr-compile{fuse=true amp=true batch_size=8 train_size=20 val_size=8 optimizer=lars-nesterov}' | filecheck %s
// RUN: tr-opt %S/../../examples/resnet50.mlir --pass-pipeline='builtin.module(tr-compile{fuse=true amp=true num_classes=1000 batch_size=256 train_size=1281167 val_size=50000})' | tr-opt | filecheck %s --check-prefix=R50
// RUN: tr-opt %S/../../examples/resnet_tiny.mlir -p 'tr-compile{amp=true batch_size=4 train_size=10 val_size=6 ema=true}' | filecheck %s --check-prefix=EMA

// ema=true (issue 17): the scalar ema_decay and the .ema twins (E_* regions, the fp16 working copies,
// the BN eq scale / bias); EMA_UPDATE = one RANGE_EMA_PARAM_UPDATE(ema_decay 23, has_nan 5) over the parameter regions
// [W_BN_BIAS 6 .. W_DEEP_CONV 11] -> [E_BN_BIAS 12 .. E_DEEP_CONV 17]; the EMA cast and BN fold; INF_EMA.
// EMA:         names = [{{.*}}"bn_momentum", "ema_decay",
// EMA-SAME:    "l0.conv_weight.ema"
// EMA:         memplan.nodes ema_update ops = ["RANGE_EMA_PARAM_UPDATE"] ins = [23, 5] {{.*}} in_ranges = [6, 11] {{.*}} out_ranges = [12, 17]
// EMA:         memplan.nodes cast_ema_fp32_to_fp16 ops = ["RANGE_CAST_FP32_TO_FP16", "BN_UPDATE_EQ_PARAMS",
// EMA:         memplan.nodes inf_main_a ops = [[OPS:.*]] ins
// EMA:         memplan.nodes inf_ema_a ops = [[OPS]] ins

// BluePrint tree form -> ArchPlan (fused: cbr, basic blocks, gap_fc; amp aligns the input C to 4)
// -> the memplan program (LARS-Nesterov: per-family LARS graphs; cbr's BN and ReLU as one epilogue kernel).
// CHECK-LABEL: arch.model @resnet_tiny input(8, 8, 4) num_classes = 10 amp fuse first_layer = 0 {
// CHECK:         arch.cbr
// CHECK:         arch.basic_block_identity
// CHECK:         arch.basic_block_projection
// CHECK:         arch.gap_fc
// CHECK:       memplan.program for @resnet_tiny {
// CHECK-NEXT:    memplan.spec batch_size = 8 train_size = 20 val_size = 8 train_res = 8 train_res_end = 8 val_res = 8 world_size = 1 optimizer lars_nesterov target cpu
// CHECK-NEXT:    memplan.variant @train_base batch = 8 res = 8 max_res = 8 channels = 4 amp plan @plan_train_base train @train infer @infer
// CHECK:         memplan.graph @train
// CHECK:           memplan.nodes first_layer_fwd_a ops = ["DTENSOR_COPY", "CONV_AMP_FWD", "BN2D_RELU_AMP_FWD"]
// CHECK:           memplan.nodes lars_first_conv_opt ops = ["LARS_COMPUTE_TRUST_RATIO_FIRST", "LARS_NESTEROV_UPDATE_FIRST"]
// CHECK:         memplan.atlas
builtin.module {
  arch.model @resnet_tiny input(8, 8, 1) num_classes = 10 {
  ^bb0(%0: tensor<?x8x8x1xf32>):
    %1 = arch.seq %0 : tensor<?x8x8x1xf32> -> tensor<?x?x?x?xf32> {
    ^bb0(%2: tensor<?x8x8x1xf32>):
      %3 = arch.cbr %2 out_ch = 16 k = 3 p = 1 : tensor<?x8x8x1xf32> -> tensor<?x?x?x?xf32>
      %4 = arch.block %3 resnet_3_3 out_ch = 16 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
      %5 = arch.block %4 resnet_3_3_ds out_ch = 32 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
      %6 = arch.gap_fc %5 out_features = 10 bias : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
      arch.yield %6 : tensor<?x?x?x?xf32>
    }
    arch.output %1 : tensor<?x?x?x?xf32>
  }
}

// -----

// An ArchPlan diagnostic stops the pipeline before the memplan phases.
// CHECK: 'arch.softmax_ce' op expected input C = num_classes = 5, got C = 10; the last layer must produce 5 logits
builtin.module {
  arch.model @wrong_head input(8, 8, 1) num_classes = 5 {
  ^bb0(%0: tensor<?x8x8x1xf32>):
    %1 = arch.seq %0 : tensor<?x8x8x1xf32> -> tensor<?x?x?x?xf32> {
    ^bb0(%2: tensor<?x8x8x1xf32>):
      %3 = arch.cbr %2 out_ch = 16 k = 3 p = 1 : tensor<?x8x8x1xf32> -> tensor<?x?x?x?xf32>
      %4 = arch.gap_fc %3 out_features = 10 bias : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
      arch.yield %4 : tensor<?x?x?x?xf32>
    }
    arch.output %1 : tensor<?x?x?x?xf32>
  }
}

// The issue's done-when command: fused AMP ResNet-50, batch 256 per process (last train batch
// 1281167 % 256 = 143, last val batch 50000 % 256 = 80), printed, parsed back and verified by a
// second tr-opt. The six plans share the arena size; one @train graph serves the four train
// variants (DEEP_FWD_BWD identical for train_base and train_last by construction); the atlas
// captures shape-invariant GraphIds once and the shape-dependent ones per distinct ShapeId
// (train_lowres equals train_base here and reuses its keys).
// R50:      memplan.program for @resnet50 {
// R50-NEXT:   memplan.spec batch_size = 256 train_size = 1281167 val_size = 50000 train_res = 224 train_res_end = 224 val_res = 224 world_size = 1 optimizer momentum target cpu
// R50-NEXT:   memplan.variant @train_base batch = 256 res = 224 max_res = 224 channels = 4 amp plan @plan_train_base train @train infer @infer
// R50-NEXT:   memplan.variant @train_last batch = 143 res = 224 max_res = 224 channels = 4 amp plan @plan_train_last train @train infer @infer
// R50-NEXT:   memplan.variant @train_lowres batch = 256 res = 224 max_res = 224 channels = 4 amp plan @plan_train_lowres train @train infer @infer
// R50-NEXT:   memplan.variant @train_lowres_last batch = 143 res = 224 max_res = 224 channels = 4 amp plan @plan_train_lowres_last train @train infer @infer
// R50-NEXT:   memplan.variant @val_base batch = 256 res = 224 max_res = 224 channels = 4 amp plan @plan_val_base infer @infer
// R50-NEXT:   memplan.variant @val_last batch = 80 res = 224 max_res = 224 channels = 4 amp plan @plan_val_last infer @infer
// R50:        memplan.plan @plan_train_base target cpu total_bytes = [[TOTAL:[0-9]+]] region_bases = {{.}}[[BASES:[0-9][0-9, ]*]]
// R50-NEXT:   memplan.plan @plan_train_last target cpu total_bytes = [[TOTAL]] region_bases = {{.}}[[BASES]]
// R50-NEXT:   memplan.plan @plan_train_lowres target cpu total_bytes = [[TOTAL]] region_bases = {{.}}[[BASES]]
// R50-NEXT:   memplan.plan @plan_train_lowres_last target cpu total_bytes = [[TOTAL]] region_bases = {{.}}[[BASES]]
// R50-NEXT:   memplan.plan @plan_val_base target cpu total_bytes = [[TOTAL]] region_bases = {{.}}[[BASES]]
// R50-NEXT:   memplan.plan @plan_val_last target cpu total_bytes = [[TOTAL]] region_bases = {{.}}[[BASES]]
// R50-NEXT:   memplan.graph @train
// R50:          memplan.nodes deep_fwd_bwd ops = ["MAXPOOL_AMP_FWD", "CONV_AMP_FWD", "BN2D_AMP_FWD"
// R50:        memplan.graph @infer
// R50:        memplan.atlas {{.*}} key_gids = [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 21, 23, 24, 25, 26, 27, 32, 2, 3, 4, 6, 7, 17, 18, 17, 18]
