// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=8 train_res_end=2},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-share-variants' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p memplan-share-variants | filecheck %s --check-prefix=ALONE

// Every variant points at its own plan (its shapes) and at the one @infer graph; the train
// variants also at the one @train graph, the val variants at none (facts section 8.6). The
// graphs are not cloned.
// CHECK-LABEL: memplan.program for @net {
// CHECK:         memplan.variant @train_base batch = 4 res = 4 max_res = 4 channels = 8 plan @plan_train_base train @train infer @infer
// CHECK-NEXT:    memplan.variant @train_last batch = 2 res = 4 max_res = 4 channels = 8 plan @plan_train_last train @train infer @infer
// CHECK-NEXT:    memplan.variant @train_lowres batch = 4 res = 2 max_res = 4 channels = 8 plan @plan_train_lowres train @train infer @infer
// CHECK-NEXT:    memplan.variant @train_lowres_last batch = 2 res = 2 max_res = 4 channels = 8 plan @plan_train_lowres_last train @train infer @infer
// CHECK-NEXT:    memplan.variant @val_base batch = 4 res = 4 max_res = 4 channels = 8 plan @plan_val_base infer @infer
// CHECK-NEXT:    memplan.variant @val_last batch = 4 res = 4 max_res = 4 channels = 8 plan @plan_val_last infer @infer
// CHECK-COUNT-2: memplan.graph @
// CHECK-NOT:     memplan.graph @
// ALONE: 'arch.model' op @net has no 'memplan.program'; memplan-share-variants runs after memplan-derive-shapes
arch.model @net input(4, 4, 8) num_classes = 8 first_layer = 0 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.gap %0 : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %2 = arch.softmax_ce %1 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %2 : tensor<?x1x1x8xf32>
}

// -----

// AMP: every node names DTensors with bytes (fp16 features and working weights; the fp32
// placeholders of the other configuration are never used), so the graphs are shared.
// CHECK-LABEL: memplan.program for @amp {
// CHECK:         memplan.variant @val_last batch = 4 res = 4 max_res = 4 channels = 8 amp plan @plan_val_last infer @infer
arch.model @amp input(4, 4, 8) num_classes = 8 amp first_layer = 0 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.bn2d %0 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %2 = arch.gap_fc %1 out_features = 8 : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %3 = arch.softmax_ce %2 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %3 : tensor<?x1x1x8xf32>
}

// -----

// Alone (second RUN line): what the earlier phases would have provided, and a node of a shared
// graph on a zero-byte DTensor (an fp16 copy in an fp32 plan).
// ALONE: 'memplan.program' op has no variants; run memplan-derive-shapes first
builtin.module {
  arch.model @tiny input(1, 1, 4) num_classes = 4 {
  ^bb0(%x: tensor<?x1x1x4xf32>):
    %0 = arch.flatten %x : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
    %1 = arch.softmax_ce %0 num_classes = 4 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
    arch.output %1 : tensor<?x1x1x4xf32>
  }
  memplan.program for @tiny {
    memplan.spec batch_size = 2 train_size = 2 val_size = 2 train_res = 1 train_res_end = 1 val_res = 1 world_size = 1 optimizer momentum target cpu
  }
}

// -----

// ALONE: 'memplan.program' op needs the graphs @train and @infer; run memplan-build-graph first
builtin.module {
  arch.model @tiny input(1, 1, 4) num_classes = 4 {
  ^bb0(%x: tensor<?x1x1x4xf32>):
    %0 = arch.flatten %x : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
    %1 = arch.softmax_ce %0 num_classes = 4 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
    arch.output %1 : tensor<?x1x1x4xf32>
  }
  memplan.program for @tiny {
    memplan.spec batch_size = 2 train_size = 2 val_size = 2 train_res = 1 train_res_end = 1 val_res = 1 world_size = 1 optimizer momentum target cpu
    memplan.variant @train_base batch = 2 res = 1 max_res = 1 channels = 4
    memplan.variant @train_last batch = 2 res = 1 max_res = 1 channels = 4
    memplan.variant @train_lowres batch = 2 res = 1 max_res = 1 channels = 4
    memplan.variant @train_lowres_last batch = 2 res = 1 max_res = 1 channels = 4
    memplan.variant @val_base batch = 2 res = 1 max_res = 1 channels = 4
    memplan.variant @val_last batch = 2 res = 1 max_res = 1 channels = 4
  }
}

// -----

// ALONE: 'memplan.program' op has no plan @plan_train_base; run memplan-create-plans first
builtin.module {
  arch.model @tiny input(1, 1, 4) num_classes = 4 {
  ^bb0(%x: tensor<?x1x1x4xf32>):
    %0 = arch.flatten %x : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
    %1 = arch.softmax_ce %0 num_classes = 4 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
    arch.output %1 : tensor<?x1x1x4xf32>
  }
  memplan.program for @tiny {
    memplan.spec batch_size = 2 train_size = 2 val_size = 2 train_res = 1 train_res_end = 1 val_res = 1 world_size = 1 optimizer momentum target cpu
    memplan.variant @train_base batch = 2 res = 1 max_res = 1 channels = 4
    memplan.variant @train_last batch = 2 res = 1 max_res = 1 channels = 4
    memplan.variant @train_lowres batch = 2 res = 1 max_res = 1 channels = 4
    memplan.variant @train_lowres_last batch = 2 res = 1 max_res = 1 channels = 4
    memplan.variant @val_base batch = 2 res = 1 max_res = 1 channels = 4
    memplan.variant @val_last batch = 2 res = 1 max_res = 1 channels = 4
    memplan.graph @train params = [] {
    }
    memplan.graph @infer params = [] {
    }
  }
}

// -----

// ALONE: 'memplan.nodes' op node 0 (FC_FP32_FWD) of @train (deep_fwd_bwd) uses DTensor 0 'l0.fc_amp_w_fp16', which has no bytes in @plan_train_base (region A_FC_WEIGHT is off in this configuration)
builtin.module {
  arch.model @tiny input(1, 1, 4) num_classes = 4 {
  ^bb0(%x: tensor<?x1x1x4xf32>):
    %0 = arch.flatten %x : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
    %1 = arch.softmax_ce %0 num_classes = 4 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
    arch.output %1 : tensor<?x1x1x4xf32>
  }
  memplan.program for @tiny {
    memplan.spec batch_size = 2 train_size = 2 val_size = 2 train_res = 1 train_res_end = 1 val_res = 1 world_size = 1 optimizer momentum target cpu
    memplan.variant @train_base batch = 2 res = 1 max_res = 1 channels = 4
    memplan.variant @train_last batch = 2 res = 1 max_res = 1 channels = 4
    memplan.variant @train_lowres batch = 2 res = 1 max_res = 1 channels = 4
    memplan.variant @train_lowres_last batch = 2 res = 1 max_res = 1 channels = 4
    memplan.variant @val_base batch = 2 res = 1 max_res = 1 channels = 4
    memplan.variant @val_last batch = 2 res = 1 max_res = 1 channels = 4
    memplan.plan @plan_train_base target cpu total_bytes = 0 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0] names = ["l0.fc_amp_w_fp16"] regions = ["A_FC_WEIGHT"] dtypes = ["f16"] shapes = [1, 1, 1, 1] slots = [0] offsets = [0] inits = ["none"] init_values = [0.0]
    memplan.graph @train params = [] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [0] in_counts = [1] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [-1]
    }
    memplan.graph @infer params = [] {
    }
  }
}
