// RUN: tr-opt %s --split-input-file --verify-diagnostics -p memplan-max-slots | filecheck %s

// Slots are the max over the six variants (batch 100, last train batch 50, last val batch 100):
// 100 x 4 fp32 features -> 2 * align256(2 * 400 + 16) = 2048 bytes; scalars 512.
// CHECK-LABEL: memplan.program for @tiny {
// CHECK:         memplan.descs 0 "arch.flatten" {{.*}} slots = [2048]
// CHECK-NEXT:    memplan.descs 1 "arch.softmax_ce" {{.*}} slots = [2048, 2048, 512, 512, 512, 512, 512]
builtin.module {
  arch.model @tiny input(1, 1, 4) num_classes = 4 {
  ^bb0(%x: tensor<?x1x1x4xf32>):
    %0 = arch.flatten %x : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
    %1 = arch.softmax_ce %0 num_classes = 4 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
    arch.output %1 : tensor<?x1x1x4xf32>
  }
  memplan.program for @tiny {
    memplan.spec batch_size = 100 train_size = 250 val_size = 100 train_res = 1 train_res_end = 1 val_res = 1 world_size = 1 optimizer momentum target cuda
    memplan.variant @train_base batch = 100 res = 1 max_res = 1 channels = 4
    memplan.variant @train_last batch = 50 res = 1 max_res = 1 channels = 4
    memplan.variant @train_lowres batch = 100 res = 1 max_res = 1 channels = 4
    memplan.variant @train_lowres_last batch = 50 res = 1 max_res = 1 channels = 4
    memplan.variant @val_base batch = 100 res = 1 max_res = 1 channels = 4
    memplan.variant @val_last batch = 100 res = 1 max_res = 1 channels = 4
    memplan.descs 0 "arch.flatten" names = ["flatten_output"] regions = ["F_FEATURE_FP32"] dtypes = ["f32"] shapes = [100, 1, 1, 4, 50, 1, 1, 4, 100, 1, 1, 4, 50, 1, 1, 4, 100, 1, 1, 4, 100, 1, 1, 4]
    memplan.descs 1 "arch.softmax_ce" names = ["ce_output", "softmax_probs", "pred_labels", "inv_scaling_factor", "loss_partial", "top1_partial", "top5_partial"] regions = ["F_FEATURE_FP32", "T_TEMP_FP32", "R_PREDICTED_LABEL", "S_SCALAR_FP32", "T_TEMP_FP32", "T_TEMP_INT32", "T_TEMP_INT32"] dtypes = ["f32", "f32", "i32", "f32", "f32", "i32", "i32"] shapes = [100, 1, 1, 4, 100, 1, 1, 4, 100, 1, 1, 1, 1, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1, 50, 1, 1, 4, 50, 1, 1, 4, 50, 1, 1, 1, 1, 1, 1, 1, 50, 1, 1, 1, 50, 1, 1, 1, 50, 1, 1, 1, 100, 1, 1, 4, 100, 1, 1, 4, 100, 1, 1, 1, 1, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1, 50, 1, 1, 4, 50, 1, 1, 4, 50, 1, 1, 1, 1, 1, 1, 1, 50, 1, 1, 1, 50, 1, 1, 1, 50, 1, 1, 1, 100, 1, 1, 4, 100, 1, 1, 4, 100, 1, 1, 1, 1, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 4, 100, 1, 1, 4, 100, 1, 1, 1, 1, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1]
  }
}


// -----

// CHECK: 'arch.model' op @alone has no 'memplan.program'; memplan-max-slots runs after memplan-derive-shapes
arch.model @alone input(1, 1, 4) num_classes = 4 {
^bb0(%x: tensor<?x1x1x4xf32>):
  %0 = arch.flatten %x : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  %1 = arch.softmax_ce %0 num_classes = 4 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  arch.output %1 : tensor<?x1x1x4xf32>
}
