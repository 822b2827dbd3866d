// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=8 train_res_end=2},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-share-variants,memplan-build-atlas' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p memplan-build-atlas | filecheck %s --check-prefix=ALONE

// Batch 4, last train batch 2, last val batch 4 (8 % 4 = 0: the full batch), train resolution 4,
// lowres 2. Shape-invariant GraphIds (transfers 0/1, zero_grad 5, comms 8/9, nan check 12,
// optimizer 15, metrics 23..27) get one key each, ShapeId (0, 0, 0, 0) and the base plan, shared
// by all six variants. Shape-dependent ones (first layer 2/3/6/7, deep 4) get one key per train
// variant (shapes 4x4x4x8, 2x4x4x8, 4x2x2x8, 2x2x2x8) with that variant's plan; the inference
// keys (17/18) come from @infer at 4x4x4x8 and val_last reuses val_base's (equal ShapeIds). Val
// variants get no first-layer, deep or optimizer slot; train variants no inference slot.
// CHECK: memplan.atlas slots = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, -1, -1, 10, -1, -1, 11, -1, -1, -1, -1, -1, -1, -1, 12, 13, 14, 15, 16, -1, -1, -1, -1, -1, 0, 1, 17, 18, 19, 5, 20, 21, 8, 9, -1, -1, 10, -1, -1, 11, -1, -1, -1, -1, -1, -1, -1, 12, 13, 14, 15, 16, -1, -1, -1, -1, -1, 0, 1, 22, 23, 24, 5, 25, 26, 8, 9, -1, -1, 10, -1, -1, 11, -1, -1, -1, -1, -1, -1, -1, 12, 13, 14, 15, 16, -1, -1, -1, -1, -1, 0, 1, 27, 28, 29, 5, 30, 31, 8, 9, -1, -1, 10, -1, -1, 11, -1, -1, -1, -1, -1, -1, -1, 12, 13, 14, 15, 16, -1, -1, -1, -1, -1, 0, 1, -1, -1, -1, 5, -1, -1, 8, 9, -1, -1, 10, -1, -1, -1, -1, 32, 33, -1, -1, -1, -1, 12, 13, 14, 15, 16, -1, -1, -1, -1, -1, 0, 1, -1, -1, -1, 5, -1, -1, 8, 9, -1, -1, 10, -1, -1, -1, -1, 32, 33, -1, -1, -1, -1, 12, 13, 14, 15, 16, -1, -1, -1, -1, -1] key_graphs = [@train, @train, @train, @train, @train, @train, @train, @train, @train, @train, @train, @train, @train, @train, @train, @infer, @train, @train, @train, @train, @train, @train, @train, @train, @train, @train, @train, @train, @train, @train, @train, @train, @infer, @infer] key_gids = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 23, 24, 25, 26, 27, 2, 3, 4, 6, 7, 2, 3, 4, 6, 7, 2, 3, 4, 6, 7, 17, 18] key_shapes = [0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 8, 4, 4, 4, 8, 4, 4, 4, 8, 0, 0, 0, 0, 4, 4, 4, 8, 4, 4, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 4, 4, 8, 2, 4, 4, 8, 2, 4, 4, 8, 2, 4, 4, 8, 2, 4, 4, 8, 4, 2, 2, 8, 4, 2, 2, 8, 4, 2, 2, 8, 4, 2, 2, 8, 4, 2, 2, 8, 2, 2, 2, 8, 2, 2, 2, 8, 2, 2, 2, 8, 2, 2, 2, 8, 2, 2, 2, 8, 4, 4, 4, 8, 4, 4, 4, 8] key_plans = [@plan_train_base, @plan_train_base, @plan_train_base, @plan_train_base, @plan_train_base, @plan_train_base, @plan_train_base, @plan_train_base, @plan_train_base, @plan_train_base, @plan_train_base, @plan_train_base, @plan_train_base, @plan_train_base, @plan_train_base, @plan_train_base, @plan_train_base, @plan_train_last, @plan_train_last, @plan_train_last, @plan_train_last, @plan_train_last, @plan_train_lowres, @plan_train_lowres, @plan_train_lowres, @plan_train_lowres, @plan_train_lowres, @plan_train_lowres_last, @plan_train_lowres_last, @plan_train_lowres_last, @plan_train_lowres_last, @plan_train_lowres_last, @plan_val_base, @plan_val_base]
// ALONE: 'arch.model' op @net has no 'memplan.program'; memplan-build-atlas runs after memplan-derive-shapes
arch.model @net input(4, 4, 8) num_classes = 8 first_layer = 0 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.gap %0 : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %2 = arch.softmax_ce %1 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %2 : tensor<?x1x1x8xf32>
}

// -----

// A non-square input: ShapeIds carry H and W; its only resolution is 2 x 6, so the lowres
// variants share the keys of train_base / train_last.
// CHECK-LABEL: memplan.program for @wide {
// CHECK:         memplan.atlas slots = {{.*}} key_gids = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 23, 24, 25, 26, 27, 2, 3, 4, 6, 7, 17, 18] key_shapes = [0, 0, 0, 0, 0, 0, 0, 0, 4, 2, 6, 8, 4, 2, 6, 8, 4, 2, 6, 8, 0, 0, 0, 0, 4, 2, 6, 8, 4, 2, 6, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 6, 8, 2, 2, 6, 8, 2, 2, 6, 8, 2, 2, 6, 8, 2, 2, 6, 8, 4, 2, 6, 8, 4, 2, 6, 8]
arch.model @wide input(2, 6, 8) num_classes = 8 first_layer = 0 {
^bb0(%x: tensor<?x2x6x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 1 : tensor<?x2x6x8xf32> -> tensor<?x2x6x8xf32>
  %1 = arch.gap %0 : tensor<?x2x6x8xf32> -> tensor<?x1x1x8xf32>
  %2 = arch.softmax_ce %1 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %2 : tensor<?x1x1x8xf32>
}
memplan.program for @wide {
  memplan.spec batch_size = 4 train_size = 10 val_size = 8 train_res = 2 train_res_end = 2 val_res = 2 world_size = 1 optimizer momentum target cpu
}

// -----

// Alone (second RUN line): what the earlier phases would have provided.
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

// ALONE: 'memplan.program' op has variants without a plan link; run memplan-share-variants first
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
