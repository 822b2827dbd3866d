// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-compile{batch_size=4 train_size=10 val_size=6 world_size=2 optimizer=nesterov target=cuda}' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-compile{batch_size=4 train_size=10 val_size=6 world_size=2 optimizer=nesterov target=cuda fuse_fc_relu=false}' | filecheck %s --check-prefix=UNFUSED
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-compile' | filecheck %s --check-prefix=NOSPEC
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-compile{batch_size=4 train_size=10 val_size=6 optimizer=rmsprop}' | filecheck %s --check-prefix=BADOPT

// The five phases and the atlas on a flat model: spec (per-process batch 4, two processes: 5 train
// and 3 val samples per process, last batches 1 and 3), six linked variants, descs, six plans for
// the cuda target, the two graphs (Nesterov updates), the atlas last; then memplan-assign-offsets
// places the transient DTensors in one pool after the regions. memplan-fuse-fc-relu runs the first
// FC and the ReLU as FC_RELU (the ReLU, read by an FC, keeps no mask and reads its output in
// backward), so the first FC's output holds only the ReLU input's gradient, written by RELU_FC_BWD.
// Without the fusion (second RUN line) the plan splits the FC's forward value from that gradient,
// l1.fc_output.v1, at the same total.
// CHECK-LABEL: memplan.program for @mlp {
// CHECK-NEXT:    memplan.spec batch_size = 4 train_size = 10 val_size = 6 train_res = 2 train_res_end = 2 val_res = 2 world_size = 2 optimizer nesterov target cuda
// CHECK-NEXT:    memplan.variant @train_base batch = 4 res = 2 max_res = 2 channels = 2 plan @plan_train_base train @train infer @infer
// CHECK-NEXT:    memplan.variant @train_last batch = 1 res = 2 max_res = 2 channels = 2 plan @plan_train_last train @train infer @infer
// CHECK-NEXT:    memplan.variant @train_lowres batch = 4 res = 2 max_res = 2 channels = 2 plan @plan_train_lowres train @train infer @infer
// CHECK-NEXT:    memplan.variant @train_lowres_last batch = 1 res = 2 max_res = 2 channels = 2 plan @plan_train_lowres_last train @train infer @infer
// CHECK-NEXT:    memplan.variant @val_base batch = 4 res = 2 max_res = 2 channels = 2 plan @plan_val_base infer @infer
// CHECK-NEXT:    memplan.variant @val_last batch = 3 res = 2 max_res = 2 channels = 2 plan @plan_val_last infer @infer
// CHECK-NEXT:    memplan.descs 0 "arch.flatten"
// CHECK-COUNT-4: memplan.descs
// CHECK-NEXT:    memplan.plan @plan_train_base target cuda total_bytes = 22528 {{.*}} pool = [18432, 4096] {{.*}} "l4.top5_partial"] regions
// UNFUSED:       memplan.plan @plan_train_base target cuda total_bytes = 22528 {{.*}} pool = [18432, 4096] {{.*}} "l1.fc_output.v1"]
// UNFUSED:       memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD", "RELU_FP32_FWD", 
// CHECK-COUNT-5: memplan.plan @plan_{{.*}} target cuda total_bytes = 22528 {{.*}} pool = [18432, 4096]
// CHECK-NEXT:    memplan.graph @train
// CHECK:           memplan.nodes deep_fwd_bwd ops = ["FC_RELU_FP32_FWD", "FC_FP32_FWD", "SOFTMAX_CE_FP32_FWD", "SOFTMAX_CE_FP32_BWD", "RELU_FC_FP32_BWD", "FC_FP32_BWD"]
// CHECK:           memplan.nodes optimizer ops = ["RANGE_UPDATE_WEIGHT_NESTEROV", "RANGE_UPDATE_BIAS_NESTEROV"]
// CHECK:         memplan.graph @infer
// CHECK:         memplan.atlas slots = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, -1, -1, 10, -1, -1, 11,
// CHECK-NEXT:  }
// NOSPEC: memplan-select-conv-algo needs the option batch_size (no 'memplan.spec' to take it from)
// BADOPT: memplan-select-conv-algo: unknown optimizer 'rmsprop', expected one of sgd, momentum, nesterov, adam, adamw, lars, lars-nesterov
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

// A module that already has a spec compiles without options; given options rewrite its fields
// (the first RUN line: batch 4 and the other values replace the spec's, train_res stays 2). Adam
// on a net without bias-like parameters: no bias update.
// CHECK-LABEL: memplan.program for @has_spec {
// CHECK-NEXT:    memplan.spec batch_size = 4 train_size = 10 val_size = 6 train_res = 2 train_res_end = 2 val_res = 2 world_size = 2 optimizer nesterov target cuda
// NOSPEC-LABEL: memplan.program for @has_spec {
// NOSPEC-NEXT:    memplan.spec batch_size = 2 train_size = 6 val_size = 6 train_res = 2 train_res_end = 2 val_res = 2 world_size = 1 optimizer adam target cpu
// NOSPEC-NEXT:    memplan.variant @train_base batch = 2 res = 2 max_res = 2 channels = 8 plan @plan_train_base train @train infer @infer
// NOSPEC:         memplan.nodes optimizer ops = ["SCALAR_INCREMENT", "ADAM_BIAS_CORRECTION", "RANGE_UPDATE_WEIGHT_ADAM"] ins
// NOSPEC:         memplan.atlas
// BADOPT: memplan-select-conv-algo: unknown optimizer 'rmsprop'
arch.model @has_spec input(2, 2, 8) num_classes = 8 first_layer = 0 {
^bb0(%x: tensor<?x2x2x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 1 : tensor<?x2x2x8xf32> -> tensor<?x2x2x8xf32>
  %1 = arch.gap %0 : tensor<?x2x2x8xf32> -> tensor<?x1x1x8xf32>
  %2 = arch.softmax_ce %1 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %2 : tensor<?x1x1x8xf32>
}
memplan.program for @has_spec {
  memplan.spec batch_size = 2 train_size = 6 val_size = 6 train_res = 2 train_res_end = 2 val_res = 2 world_size = 1 optimizer adam target cpu
}

// -----

// A diagnostic of a phase stops the pipeline (here phase 1: the first layer).
// CHECK: 'arch.gap' op cannot be the first layer: it must be flatten, conv, channel_padding or cbr (the first layer reads the input buffers A/B)
arch.model @gap_first input(2, 2, 8) num_classes = 8 {
^bb0(%x: tensor<?x2x2x8xf32>):
  %0 = arch.gap %x : tensor<?x2x2x8xf32> -> tensor<?x1x1x8xf32>
  %1 = arch.softmax_ce %0 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %1 : tensor<?x1x1x8xf32>
}
