// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-build-graph' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p memplan-build-graph | filecheck %s --check-prefix=ALONE
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-build-graph{decay_all=true}' | filecheck %s --check-prefix=DECAY

// MLP (facts sections 3, 7, 8). Ids: 0 label_a, 1 data_a, 2 label_b, 3 data_b, 4 label_smce,
// 5 has_nan, 6 lr, 7 scaling, 8 label_smoothing, 9-11 loss/top1/top5, 12-14 batch sizes, 15-17
// accumulated metrics, 18 beta, 19 wd, 23 l0.flatten_output, 24-28 l1.fc_{weight, bias, output,
// weight_grad, bias_grad}, 33/34 l2.relu_{output, output_grad}, 35-39 l3.fc_*, 44-50 l4 (ce_output,
// probs, pred, inv_scaling, partials).
// First layer: label copy, then flatten from data_a / data_b. Deep: forward of layers 1..3, then
// backward 4..1, the logits gradient in ce_output (44). The ReLU feeds an FC, whose backward reads
// it: the ReLU writes no mask and its backward reads its output (RELU_FP32_BWD_FROM_OUTPUT
// [34, 33]), so the FC writes its dX into the ReLU output's gradient slot (34); every other dX is
// in place (the ReLU's over the FC output 26, the first FC's over 23). Inference skips nothing
// here and uses RELU_*_INF, without a mask.
// CHECK-LABEL: memplan.graph @train params = [{start_dim = 1 : i64}, {bias = true, out_features = 4 : i64}, {bias = false, out_features = 3 : i64}, {num_classes = 3 : i64}] {
// CHECK-NEXT:    memplan.nodes transfer_a ops = ["RANGE_H2D_COPY_A"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [49, 49, 50, 50] out_range_counts = [2] params = [-1]
// CHECK-NEXT:    memplan.nodes transfer_b ops = ["RANGE_H2D_COPY_B"] {{.*}} out_ranges = [51, 51, 52, 52] out_range_counts = [2] params = [-1]
// CHECK-NEXT:    memplan.nodes first_layer_fwd_a ops = ["DTENSOR_COPY", "FLATTEN_FP32_FWD"] ins = [0, 1] in_counts = [1, 1] outs = [4, 23] out_counts = [1, 1] {{.*}} params = [-1, 0]
// CHECK-NEXT:    memplan.nodes first_layer_fwd_b ops = ["DTENSOR_COPY", "FLATTEN_FP32_FWD"] ins = [2, 3] in_counts = [1, 1] outs = [4, 23] out_counts = [1, 1] {{.*}} params = [-1, 0]
// CHECK-NEXT:    memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD", "RELU_FP32_FWD", "FC_FP32_FWD", "SOFTMAX_CE_FP32_FWD", "SOFTMAX_CE_FP32_BWD", "FC_FP32_BWD", "RELU_FP32_BWD_FROM_OUTPUT", "FC_FP32_BWD"] ins = [23, 24, 25, 26, 33, 35, 36, 37, 7, 12, 4, 8, 45, 47, 7, 4, 8, 44, 35, 33, 34, 33, 26, 24, 23] in_counts = [3, 1, 3, 5, 5, 3, 2, 3] outs = [26, 33, 37, 9, 47, 46, 45, 10, 11, 48, 49, 50, 44, 34, 38, 39, 26, 23, 27, 28] out_counts = [1, 1, 1, 9, 1, 3, 1, 3] in_ranges = [] in_range_counts = [0, 0, 0, 0, 0, 0, 0, 0] out_ranges = [] out_range_counts = [0, 0, 0, 0, 0, 0, 0, 0] params = [1, -1, 2, 3, 3, 2, -1, 1]
// CHECK-NEXT:    memplan.nodes zero_grad ops = ["RANGE_CLEAR"] {{.*}} out_ranges = [24, 33] out_range_counts = [1] params = [-1]
// CHECK-NEXT:    memplan.nodes first_layer_bwd_a ops = ["FLATTEN_FP32_BWD_FIRST_LAYER"] ins = [] in_counts = [0] outs = [] out_counts = [0] {{.*}} params = [0]
// CHECK-NEXT:    memplan.nodes first_layer_bwd_b ops = ["FLATTEN_FP32_BWD_FIRST_LAYER"]
// CHECK-NEXT:    memplan.nodes first_comm ops = ["RANGE_MEAN_ALLREDUCE"] {{.*}} in_ranges = [24, 28] in_range_counts = [1] out_ranges = [24, 28] out_range_counts = [1]
// CHECK-NEXT:    memplan.nodes deep_comm ops = ["RANGE_MEAN_ALLREDUCE"] {{.*}} in_ranges = [29, 30] in_range_counts = [1] out_ranges = [29, 30] out_range_counts = [1]
// CHECK-NEXT:    memplan.nodes nan_check_and_grad_scaling ops = ["RANGE_CHECK_NAN"] ins = [] in_counts = [0] outs = [5] out_counts = [1] in_ranges = [24, 29] in_range_counts = [1]
// CHECK-NEXT:    memplan.nodes optimizer ops = ["RANGE_UPDATE_WEIGHT_MOMENTUM", "RANGE_UPDATE_BIAS_MOMENTUM"] ins = [6, 19, 18, 7, 5, 6, 18, 7, 5] in_counts = [5, 4] outs = [] out_counts = [0, 0] in_ranges = [9, 11, 27, 29, 37, 39, 6, 8, 24, 26, 34, 36] in_range_counts = [3, 3] out_ranges = [9, 11, 37, 39, 6, 8, 34, 36] out_range_counts = [2, 2] params = [-1, -1]
// CHECK-NEXT:    memplan.nodes accum_metrics ops = ["RANGE_ACCUM_METRICS"] ins = [12, 9, 10, 11] in_counts = [4] outs = [15, 16, 17] out_counts = [3]
// decay_all=true: the bias-like parameters (FC bias, [W_BN_BIAS .. W_FC_BIAS] = regions 6..8) run
// the weight kernel of the optimizer with wd (19) among its ids, like the weights.
// DECAY-LABEL: memplan.graph @train
// DECAY:         memplan.nodes optimizer ops = ["RANGE_UPDATE_WEIGHT_MOMENTUM", "RANGE_UPDATE_WEIGHT_MOMENTUM"] ins = [6, 19, 18, 7, 5, 6, 19, 18, 7, 5] in_counts = [5, 5] {{.*}} in_ranges = [9, 11, 27, 29, 37, 39, 6, 8, 24, 26, 34, 36]
// DECAY-NOT:     RANGE_UPDATE_BIAS
// CHECK-NEXT:    memplan.nodes accum_metrics_train_last ops = ["RANGE_ACCUM_METRICS"] ins = [13, 9, 10, 11]
// CHECK-NEXT:    memplan.nodes accum_metrics_val_last ops = ["RANGE_ACCUM_METRICS"] ins = [14, 9, 10, 11]
// CHECK-NEXT:    memplan.nodes clear_metrics ops = ["RANGE_CLEAR"] {{.*}} out_ranges = [67, 67] out_range_counts = [1] params = [-1]
// CHECK-NEXT:  }
// CHECK-NEXT:  memplan.graph @infer params = [{start_dim = 1 : i64}, {bias = true, out_features = 4 : i64}, {bias = false, out_features = 3 : i64}, {num_classes = 3 : i64}] {
// CHECK-NEXT:    memplan.nodes inf_main_a ops = ["DTENSOR_COPY", "FLATTEN_FP32_FWD", "FC_FP32_FWD", "RELU_FP32_INF", "FC_FP32_FWD", "SOFTMAX_CE_FP32_INF"] ins = [0, 1, 23, 24, 25, 26, 33, 35, 36, 37, 7, 12, 4, 8] in_counts = [1, 1, 3, 1, 3, 5] outs = [4, 23, 26, 33, 37, 9, 47, 46, 45, 10, 11, 48, 49, 50] out_counts = [1, 1, 1, 1, 1, 9] {{.*}} params = [-1, 0, 1, -1, 2, 3]
// CHECK-NEXT:    memplan.nodes inf_main_b ops = ["DTENSOR_COPY", "FLATTEN_FP32_FWD", "FC_FP32_FWD", "RELU_FP32_INF", "FC_FP32_FWD", "SOFTMAX_CE_FP32_INF"] ins = [2, 3, 23,
// CHECK-NEXT:    memplan.nodes val_result_comm ops = ["RANGE_MEAN_ALLREDUCE"] {{.*}} in_ranges = [67, 67] in_range_counts = [1] out_ranges = [67, 67] out_range_counts = [1] params = [-1]
// CHECK-NEXT:  }
// CHECK-NEXT: }
// ALONE: 'arch.model' op @mlp has no 'memplan.program'; memplan-build-graph runs after memplan-derive-shapes
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

// A value with two uses (%1, read by the conv and by the identity shortcut): its gradient
// contributions run in backward order, layers from last to first, so the identity (layer 3)
// writes the gradient slot l1.relu_output_grad (36), the conv (layer 2) writes the partial slot
// (37) and GRAD_ACCUM adds it to the slot, which the relu then reads. The relu output itself (34)
// is never overwritten, so the conv's backward still reads its input. GAP writes tanh's output
// gradient into its own grad slot (50); tanh's backward reads it and its input (47), not its output
// (48: the derivative is recomputed), and writes dX over its input; the add's backward
// writes both operands' gradients in place (46 identity output, 39 conv output). The convs' kernel
// workspaces are the shared ws_col (30), ws_tmp (31, the compiled small-channel conv kernels'
// scratch) and ws_wbuf (32).
// CHECK-LABEL: memplan.graph @train
// CHECK:         memplan.nodes deep_fwd_bwd ops = ["RELU_FP32_FWD", "CONV_FP32_FWD", "IDENTITY_FP32_FWD", "ADD_FP32_FWD", "TANH_FP32_FWD", "GAP_FP32_FWD", "SOFTMAX_CE_FP32_FWD", "SOFTMAX_CE_FP32_BWD", "GAP_FP32_BWD", "TANH_FP32_BWD", "ADD_FP32_BWD", "IDENTITY_FP32_BWD", "CONV_FP32_BWD", "GRAD_ACCUM_FP32", "RELU_FP32_BWD"] ins = [24, 34, 38, 34, 46, 39, 47, 48, 49, 7, 12, 4, 8, 52, 54, 7, 4, 8, 51, 50, 47, 47, 46, 39, 38, 34, 37, 36, 36, 35] in_counts = [1, 2, 1, 2, 1, 1, 5, 5, 1, 2, 1, 1, 3, 2, 2] outs = [34, 35, 39, 43, 44, 46, 47, 48, 49, 9, 54, 53, 52, 10, 11, 55, 56, 57, 51, 50, 47, 46, 39, 36, 37, 40, 32, 36, 24] out_counts = [2, 3, 1, 1, 1, 1, 9, 1, 1, 1, 2, 1, 3, 1, 1]
// CHECK:         memplan.nodes first_layer_bwd_a ops = ["CONV_FP32_BWD_FIRST_LAYER"] ins = [24, 23, 1] in_counts = [3] outs = [25, 30, 32, 31] out_counts = [4]
// CHECK-NEXT:    memplan.nodes first_layer_bwd_b ops = ["CONV_FP32_BWD_FIRST_LAYER"] ins = [24, 23, 3] in_counts = [3] outs = [25, 30, 32, 31] out_counts = [4]
arch.model @two_uses input(4, 4, 8) num_classes = 8 first_layer = 0 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.relu %0 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %2 = arch.conv %1 out_ch = 8 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %3 = arch.identity %1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %4 = arch.add %3, %2 : tensor<?x4x4x8xf32>, tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %5 = arch.tanh %4 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %6 = arch.gap %5 : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %7 = arch.softmax_ce %6 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %7 : tensor<?x1x1x8xf32>
}

// -----

// AMP: fp16 working weights (26 l0.conv_amp_w_fp16), the first conv writes fp16 weight
// gradients (27) and no dX; BN forward reads and updates the running statistics in B_NEXT;
// gap_fc is GAP + FC kernels; casts of the first conv's fp16 gradient (G 32 -> 28) and of the
// weights (W 9..11 -> A 21..23); loss scaling after the NaN check; BN statistics comm and copy;
// BN inference parameters (gamma 34, beta 35, next mean 39, next var 40, bn_epsilon 21 ->
// eq_scale 44, eq_bias 43). The fp16 conv computes in fp32 workspaces ws_col, ws_wbuf, ws_ybuf
// (30..32).
// CHECK-LABEL: memplan.graph @train params = [{groups = 1 : i64, k = 3 : i64, out_ch = 8 : i64, p = 1 : i64, s = 1 : i64}, {eps = 1.000000e-05 : f64, momentum = 1.000000e-01 : f64}, {bias = true, out_features = 8 : i64}, {num_classes = 8 : i64}, {eps = 1.000000e-05 : f64}] {
// CHECK:         memplan.nodes first_layer_fwd_a ops = ["DTENSOR_COPY", "CONV_AMP_FWD"] ins = [0, 1, 26] in_counts = [1, 2] outs = [4, 24, 28, 29, 30, 31, 32] out_counts = [1, 6]
// CHECK-NEXT:    memplan.nodes first_layer_fwd_b ops = ["DTENSOR_COPY", "CONV_AMP_FWD"] ins = [2, 3, 26]
// CHECK-NEXT:    memplan.nodes deep_fwd_bwd ops = ["BN2D_AMP_FWD", "RELU_AMP_FWD", "GAP_AMP_FWD", "FC_AMP_FWD", "SOFTMAX_CE_AMP_FWD", "SOFTMAX_CE_AMP_BWD", "FC_AMP_BWD", "GAP_AMP_BWD", "RELU_AMP_BWD", "BN2D_AMP_BWD"] ins = [24, 34, 35, 39, 40, 21, 22, 36, 49, 51, 57, 53, 54, 7, 12, 4, 8, 63, 65, 7, 4, 8, 62, 57, 51, 51, 49, 50, 36, 34, 45, 46, 24] in_counts = [7, 1, 1, 3, 5, 5, 3, 1, 2, 5] outs = [36, 45, 46, 39, 40, 49, 50, 51, 54, 59, 31, 32, 9, 65, 64, 63, 10, 11, 66, 67, 68, 62, 51, 55, 56, 59, 31, 32, 49, 36, 24, 41, 42] out_counts = [5, 2, 1, 4, 9, 1, 6, 1, 1, 3] {{.*}} params = [1, -1, -1, 2, 3, 3, 2, -1, -1, 1]
// CHECK:         memplan.nodes first_layer_bwd_a ops = ["CONV_AMP_BWD_FIRST_LAYER"] ins = [24, 26, 1] in_counts = [3] outs = [27, 30, 31, 32] out_counts = [4]
// CHECK:         memplan.nodes cast_first_grad_fp16_to_fp32 ops = ["RANGE_CAST_FP16_TO_FP32"] {{.*}} in_ranges = [32, 32] in_range_counts = [1] out_ranges = [28, 28] out_range_counts = [1]
// CHECK-NEXT:    memplan.nodes nan_check_and_grad_scaling ops = ["RANGE_CHECK_NAN", "RANGE_GRAD_SCALING"] ins = [5, 7] in_counts = [0, 2] outs = [5, 7] out_counts = [1, 1] in_ranges = [24, 29] in_range_counts = [1, 0]
// CHECK-NEXT:    memplan.nodes stats_comm ops = ["RANGE_BN_STATS_ALLREDUCE"] {{.*}} in_ranges = [2, 3] in_range_counts = [1] out_ranges = [2, 3] out_range_counts = [1]
// CHECK-NEXT:    memplan.nodes update_stats ops = ["RANGE_D2D_COPY"] {{.*}} in_ranges = [2, 2, 3, 3] in_range_counts = [2] out_ranges = [0, 0, 1, 1] out_range_counts = [2]
// CHECK-NEXT:    memplan.nodes optimizer ops = ["RANGE_UPDATE_WEIGHT_MOMENTUM", "RANGE_UPDATE_BIAS_MOMENTUM"]
// CHECK-NEXT:    memplan.nodes cast_main_fp32_to_fp16 ops = ["RANGE_CAST_FP32_TO_FP16"] {{.*}} in_ranges = [9, 11] in_range_counts = [1] out_ranges = [21, 23] out_range_counts = [1]
// CHECK:         memplan.nodes update_bn_inf_params ops = ["BN_UPDATE_EQ_PARAMS"] ins = [34, 35, 39, 40, 21] in_counts = [5] outs = [44, 43] out_counts = [2] {{.*}} params = [4]
// CHECK:       memplan.graph @infer
// CHECK-NEXT:    memplan.nodes inf_main_a ops = ["DTENSOR_COPY", "CONV_AMP_INF", "BN2D_AMP_INF", "RELU_AMP_INF", "GAP_AMP_FWD", "FC_AMP_FWD", "SOFTMAX_CE_AMP_INF"] ins = [0, 1, 26, 24, 44, 43, 36,
arch.model @amp input(4, 4, 4) num_classes = 8 amp first_layer = 0 {
^bb0(%x: tensor<?x4x4x4xf32>):
  %0 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.bn2d %0 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %2 = arch.relu %1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %3 = arch.gap_fc %2 out_features = 8 bias : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %4 = arch.softmax_ce %3 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %4 : tensor<?x1x1x8xf32>
}

// -----

// Dropout trains (its mask, 30, and the rotated seed, 25) and is skipped by inference: the FC
// reads the flatten output (28) there. AdamW (from the program's spec): step and bias corrections
// (22 step, 18 beta, 20 beta2 -> 23, 24), decoupled weight decay on weights only (wd, 19).
// CHECK-LABEL: memplan.graph @train params = [{start_dim = 1 : i64}, {p = 5.000000e-01 : f64}, {bias = false, out_features = 4 : i64}, {num_classes = 4 : i64}] {
// CHECK:         memplan.nodes deep_fwd_bwd ops = ["DROPOUT_FP32_FWD", "FC_FP32_FWD", "SOFTMAX_CE_FP32_FWD", "SOFTMAX_CE_FP32_BWD", "FC_FP32_BWD", "DROPOUT_FP32_BWD"] ins = [28, 25, 29, 31, 32, 33, 7, 12, 4, 8, 43, 45, 7, 4, 8, 42, 31, 29, 29, 30] in_counts = [2, 3, 5, 5, 3, 2] outs = [29, 30, 25, 33, 9, 45, 44, 43, 10, 11, 46, 47, 48, 42, 29, 34, 35, 28] out_counts = [3, 1, 9, 1, 3, 1]
// CHECK:         memplan.nodes optimizer ops = ["SCALAR_INCREMENT", "ADAM_BIAS_CORRECTION", "RANGE_UPDATE_WEIGHT_ADAMW", "RANGE_UPDATE_BIAS_ADAM"] ins = [22, 5, 22, 18, 20, 6, 19, 18, 20, 21, 7, 23, 24, 5, 6, 18, 20, 21, 7, 23, 24, 5] in_counts = [2, 3, 9, 8] outs = [22, 23, 24] out_counts = [1, 2, 0, 0] in_ranges = [9, 11, 27, 29, 37, 39, 43, 45, 6, 8, 24, 26, 34, 36, 40, 42] in_range_counts = [0, 0, 4, 4] out_ranges = [9, 11, 37, 39, 43, 45, 6, 8, 34, 36, 40, 42] out_range_counts = [0, 0, 3, 3]
// CHECK:       memplan.graph @infer
// CHECK-NEXT:    memplan.nodes inf_main_a ops = ["DTENSOR_COPY", "FLATTEN_FP32_FWD", "FC_FP32_FWD", "SOFTMAX_CE_FP32_INF"] ins = [0, 1, 28, 31, 32, 33, 7, 12, 4, 8]
arch.model @drop input(1, 1, 8) num_classes = 4 first_layer = 0 {
^bb0(%x: tensor<?x1x1x8xf32>):
  %0 = arch.flatten %x : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %1 = arch.dropout %0 p = 5.000000e-01 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %2 = arch.fc %1 out_features = 4 : tensor<?x1x1x8xf32> -> tensor<?x1x1x4xf32>
  %3 = arch.softmax_ce %2 num_classes = 4 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  arch.output %3 : tensor<?x1x1x4xf32>
}
memplan.program for @drop {
  memplan.spec batch_size = 2 train_size = 2 val_size = 2 train_res = 1 train_res_end = 1 val_res = 1 world_size = 1 optimizer adamw target cpu
}

// -----

// LARS-Nesterov: no weight range update; one trust-ratio and one update node per weight tensor
// in the graph of its family, with the family's partial-sum buffer (62 fc, 63 first conv, 64
// deep conv), W/G/M/N paired by name; bias-like parameters use the Nesterov range update.
// CHECK-LABEL: memplan.graph @train
// CHECK:         memplan.nodes optimizer ops = ["RANGE_UPDATE_BIAS_NESTEROV"] ins = [6, 18, 7, 5] in_counts = [4] {{.*}} in_ranges = [6, 8, 24, 26, 34, 36] in_range_counts = [3] out_ranges = [6, 8, 34, 36] out_range_counts = [2]
// CHECK:         memplan.nodes lars_fc_opt ops = ["LARS_COMPUTE_TRUST_RATIO_FC", "LARS_NESTEROV_UPDATE_FC"] ins = [45, 48, 20, 19, 21, 7, 5, 62, 45, 48, 52, 54, 6, 18, 19, 7, 5] in_counts = [8, 9] outs = [54, 45, 52] out_counts = [1, 2]
// CHECK-NEXT:    memplan.nodes lars_first_conv_opt ops = ["LARS_COMPUTE_TRUST_RATIO_FIRST", "LARS_NESTEROV_UPDATE_FIRST"] ins = [25, 27, 20, 19, 21, 7, 5, 63, 25, 27, 33, 34, 6, 18, 19, 7, 5] in_counts = [8, 9] outs = [34, 25, 33] out_counts = [1, 2]
// CHECK-NEXT:    memplan.nodes lars_deep_conv_opt ops = ["LARS_COMPUTE_TRUST_RATIO_DEEP", "LARS_NESTEROV_UPDATE_DEEP"] ins = [35, 37, 20, 19, 21, 7, 5, 64, 35, 37, 42, 43, 6, 18, 19, 7, 5] in_counts = [8, 9] outs = [43, 35, 42] out_counts = [1, 2]
arch.model @lars input(4, 4, 8) num_classes = 4 first_layer = 0 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.conv %0 out_ch = 8 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %2 = arch.gap_fc %1 out_features = 4 : tensor<?x4x4x8xf32> -> tensor<?x1x1x4xf32>
  %3 = arch.softmax_ce %2 num_classes = 4 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  arch.output %3 : tensor<?x1x1x4xf32>
}
memplan.program for @lars {
  memplan.spec batch_size = 2 train_size = 2 val_size = 2 train_res = 4 train_res_end = 4 val_res = 4 world_size = 1 optimizer lars_nesterov target cpu
}

// -----

// CHECK: 'arch.relu' op result has no use, so nothing computes its gradient; every layer must feed the loss (the model must end in softmax_ce)
arch.model @dead input(1, 1, 8) num_classes = 8 first_layer = 0 {
^bb0(%x: tensor<?x1x1x8xf32>):
  %0 = arch.flatten %x : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %1 = arch.relu %0 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %2 = arch.softmax_ce %0 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %2 : tensor<?x1x1x8xf32>
}

// -----

// CHECK: 'arch.add' op reads one value twice, and that value has other uses: its gradient contributions cannot share the one partial slot
arch.model @twice input(1, 1, 8) num_classes = 8 first_layer = 0 {
^bb0(%x: tensor<?x1x1x8xf32>):
  %0 = arch.flatten %x : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %1 = arch.relu %0 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %2 = arch.add %1, %1 : tensor<?x1x1x8xf32>, tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %3 = arch.add %2, %1 : tensor<?x1x1x8xf32>, tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %4 = arch.softmax_ce %3 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %4 : tensor<?x1x1x8xf32>
}

// -----

// Alone (second RUN line), the pass reports what the earlier phases would have provided.
// ALONE: 'memplan.program' op has no spec or variants; run memplan-derive-shapes first
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

// ALONE: 'memplan.program' op has 0 'memplan.descs' for 2 layers of @tiny; rerun memplan-derive-shapes
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

// ALONE: 'memplan.descs' op 0 describes 'arch.relu', but layer 0 is 'arch.flatten'; rerun memplan-derive-shapes
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
    memplan.descs 0 "arch.relu" names = ["flatten_output"] regions = ["F_FEATURE_FP32"] dtypes = ["f32"] shapes = [2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 4] slots = [2048]
    memplan.descs 1 "arch.softmax_ce" names = ["ce_output", "softmax_probs", "pred_labels", "inv_scaling_factor", "loss_partial", "top1_partial", "top5_partial"] regions = ["F_FEATURE_FP32", "T_TEMP_FP32", "R_PREDICTED_LABEL", "S_SCALAR_FP32", "T_TEMP_FP32", "T_TEMP_INT32", "T_TEMP_INT32"] dtypes = ["f32", "f32", "i32", "f32", "f32", "i32", "i32"] shapes = [2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1] slots = [2048, 2048, 512, 512, 512, 512, 512]
  }
}

// -----

// ALONE: 'memplan.descs' op 1 lists tensors ['ce_output', 'pred_labels', 'softmax_probs', 'inv_scaling_factor', 'loss_partial', 'top1_partial', 'top5_partial'], the descriptor of 'arch.softmax_ce' ['ce_output', 'softmax_probs', 'pred_labels', 'inv_scaling_factor', 'loss_partial', 'top1_partial', 'top5_partial']; rerun memplan-derive-shapes
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
    memplan.descs 0 "arch.flatten" names = ["flatten_output"] regions = ["F_FEATURE_FP32"] dtypes = ["f32"] shapes = [2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 4] slots = [2048]
    memplan.descs 1 "arch.softmax_ce" names = ["ce_output", "pred_labels", "softmax_probs", "inv_scaling_factor", "loss_partial", "top1_partial", "top5_partial"] regions = ["F_FEATURE_FP32", "T_TEMP_FP32", "R_PREDICTED_LABEL", "S_SCALAR_FP32", "T_TEMP_FP32", "T_TEMP_INT32", "T_TEMP_INT32"] dtypes = ["f32", "f32", "i32", "f32", "f32", "i32", "i32"] shapes = [2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1] slots = [2048, 2048, 512, 512, 512, 512, 512]
  }
}

// -----

// ALONE: 'arch.conv' op cannot be planned from its 'memplan.descs' (window k = 3, s = 1, p = 0 does not fit input size 2); rerun memplan-derive-shapes
builtin.module {
  arch.model @geom input(4, 4, 8) num_classes = 8 {
  ^bb0(%x: tensor<?x4x4x8xf32>):
    %0 = arch.conv %x out_ch = 8 k = 3 : tensor<?x4x4x8xf32> -> tensor<?x2x2x8xf32>
    %1 = arch.gap %0 : tensor<?x2x2x8xf32> -> tensor<?x1x1x8xf32>
    %2 = arch.softmax_ce %1 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
    arch.output %2 : tensor<?x1x1x8xf32>
  }
  memplan.program for @geom {
    memplan.spec batch_size = 2 train_size = 2 val_size = 2 train_res = 2 train_res_end = 2 val_res = 2 world_size = 1 optimizer momentum target cpu
    memplan.variant @train_base batch = 2 res = 2 max_res = 2 channels = 8
    memplan.variant @train_last batch = 2 res = 2 max_res = 2 channels = 8
    memplan.variant @train_lowres batch = 2 res = 2 max_res = 2 channels = 8
    memplan.variant @train_lowres_last batch = 2 res = 2 max_res = 2 channels = 8
    memplan.variant @val_base batch = 2 res = 2 max_res = 2 channels = 8
    memplan.variant @val_last batch = 2 res = 2 max_res = 2 channels = 8
    memplan.descs 0 "arch.conv" names = ["conv_output"] regions = ["F_FEATURE_FP32"] dtypes = ["f32"] shapes = [2, 1, 1, 8, 2, 1, 1, 8, 2, 1, 1, 8, 2, 1, 1, 8, 2, 1, 1, 8, 2, 1, 1, 8]
    memplan.descs 1 "arch.gap" names = ["gap_output"] regions = ["F_FEATURE_FP32"] dtypes = ["f32"] shapes = [2, 1, 1, 8, 2, 1, 1, 8, 2, 1, 1, 8, 2, 1, 1, 8, 2, 1, 1, 8, 2, 1, 1, 8]
    memplan.descs 2 "arch.softmax_ce" names = ["ce_output"] regions = ["F_FEATURE_FP32"] dtypes = ["f32"] shapes = [2, 1, 1, 8, 2, 1, 1, 8, 2, 1, 1, 8, 2, 1, 1, 8, 2, 1, 1, 8, 2, 1, 1, 8]
  }
}

// -----

// ALONE: 'memplan.program' op has no 'memplan.plan'; run memplan-create-plans first
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
    memplan.descs 0 "arch.flatten" names = ["flatten_output"] regions = ["F_FEATURE_FP32"] dtypes = ["f32"] shapes = [2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 4] slots = [2048]
    memplan.descs 1 "arch.softmax_ce" names = ["ce_output", "softmax_probs", "pred_labels", "inv_scaling_factor", "loss_partial", "top1_partial", "top5_partial"] regions = ["F_FEATURE_FP32", "T_TEMP_FP32", "R_PREDICTED_LABEL", "S_SCALAR_FP32", "T_TEMP_FP32", "T_TEMP_INT32", "T_TEMP_INT32"] dtypes = ["f32", "f32", "i32", "f32", "f32", "i32", "i32"] shapes = [2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1] slots = [2048, 2048, 512, 512, 512, 512, 512]
  }
}

// -----

// ALONE: 'arch.model' op needs DTensor 'label_a', which @plan_train_base does not have; rerun memplan-create-plans
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
    memplan.descs 0 "arch.flatten" names = ["flatten_output"] regions = ["F_FEATURE_FP32"] dtypes = ["f32"] shapes = [2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 4] slots = [2048]
    memplan.descs 1 "arch.softmax_ce" names = ["ce_output", "softmax_probs", "pred_labels", "inv_scaling_factor", "loss_partial", "top1_partial", "top5_partial"] regions = ["F_FEATURE_FP32", "T_TEMP_FP32", "R_PREDICTED_LABEL", "S_SCALAR_FP32", "T_TEMP_FP32", "T_TEMP_INT32", "T_TEMP_INT32"] dtypes = ["f32", "f32", "i32", "f32", "f32", "i32", "i32"] shapes = [2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 4, 2, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1] slots = [2048, 2048, 512, 512, 512, 512, 512]
    memplan.plan @plan_train_base target cpu total_bytes = 0 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [] names = [] regions = [] dtypes = [] shapes = [] slots = [] offsets = [] inits = [] init_values = []
  }
}
