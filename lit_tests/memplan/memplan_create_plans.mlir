// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-create-plans{optimizer=sgd}' | filecheck %s

// Six plans with the baseline DTensors first (plain SGD: wd but no beta), then the layers' tensors
// named l<layer>.<name>; ids, slots and offsets are shared, shapes follow each variant's batch
// (train_last: 250 % 100 = 50). The spec's optimizer is rewritten by the option.
// CHECK-LABEL: memplan.program for @tiny {
// CHECK-NEXT:    memplan.spec {{.*}} optimizer sgd target cuda
// CHECK:         memplan.plan @plan_train_base target cuda total_bytes = 23040 {{.*}} ids = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29] names = ["label_a", "data_a", "label_b", "data_b", "label_smce", "has_nan", "lr", "scaling", "label_smoothing", "loss", "top1", "top5", "local_batch_size", "last_train_batch_size", "last_val_batch_size", "accum_loss", "accum_top1", "accum_top5", "wd", "dropout_seed", "bn_epsilon", "bn_momentum", "l0.flatten_output", "l1.ce_output", "l1.softmax_probs", "l1.pred_labels", "l1.inv_scaling_factor", "l1.loss_partial", "l1.top1_partial", "l1.top5_partial"]
// CHECK-SAME:    inits = ["none", "none", "none", "none", "none", "zeros", "host", "fill", "host", "zeros", "zeros", "zeros", "fill", "fill", "fill", "zeros", "zeros", "zeros", "host", "host", "fill", "fill", "none", "none", "none", "zeros", "none", "none", "none", "none"]
// CHECK-SAME:    init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 1.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 1.000000e+02, 5.000000e+01, 1.000000e+02,
// CHECK-NEXT:    memplan.plan @plan_train_last target cuda total_bytes = 23040 {{.*}} shapes = [50, 1, 1, 1, 50, 1, 1, 4,
// CHECK-NEXT:    memplan.plan @plan_train_lowres
// CHECK-NEXT:    memplan.plan @plan_train_lowres_last
// CHECK-NEXT:    memplan.plan @plan_val_base
// CHECK-NEXT:    memplan.plan @plan_val_last
// CHECK-NEXT:  }
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
    memplan.descs 0 "arch.flatten" names = ["flatten_output"] regions = ["F_FEATURE_FP32"] dtypes = ["f32"] shapes = [100, 1, 1, 4, 50, 1, 1, 4, 100, 1, 1, 4, 50, 1, 1, 4, 100, 1, 1, 4, 100, 1, 1, 4] slots = [2048]
    memplan.descs 1 "arch.softmax_ce" names = ["ce_output", "softmax_probs", "pred_labels", "inv_scaling_factor", "loss_partial", "top1_partial", "top5_partial"] regions = ["F_FEATURE_FP32", "T_TEMP_FP32", "R_PREDICTED_LABEL", "S_SCALAR_FP32", "T_TEMP_FP32", "T_TEMP_INT32", "T_TEMP_INT32"] dtypes = ["f32", "f32", "i32", "f32", "f32", "i32", "i32"] shapes = [100, 1, 1, 4, 100, 1, 1, 4, 100, 1, 1, 1, 1, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1, 50, 1, 1, 4, 50, 1, 1, 4, 50, 1, 1, 1, 1, 1, 1, 1, 50, 1, 1, 1, 50, 1, 1, 1, 50, 1, 1, 1, 100, 1, 1, 4, 100, 1, 1, 4, 100, 1, 1, 1, 1, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1, 50, 1, 1, 4, 50, 1, 1, 4, 50, 1, 1, 1, 1, 1, 1, 1, 50, 1, 1, 1, 50, 1, 1, 1, 50, 1, 1, 1, 100, 1, 1, 4, 100, 1, 1, 4, 100, 1, 1, 1, 1, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 4, 100, 1, 1, 4, 100, 1, 1, 1, 1, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1] slots = [2048, 2048, 512, 512, 512, 512, 512]
  }
}


// -----

// CHECK: 'memplan.descs' op has no slots; run memplan-max-slots first
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

