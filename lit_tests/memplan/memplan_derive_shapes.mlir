// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=5}' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=5 train_res_end=14}' | filecheck %s --check-prefix=LOWRES
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=9 val_size=5}' | filecheck %s --check-prefix=BN1

// The six variants (last train batch 10 % 4 = 2, last val batch 5 % 4 = 1) and one descs op per
// layer with the shapes of all six variants. The ReLU feeds an FC, whose backward reads it: it keeps
// no mask, reads its output in backward and so gets a gradient slot of its own.
// CHECK-LABEL: memplan.program for @mlp {
// CHECK-NEXT:    memplan.spec batch_size = 4 train_size = 10 val_size = 5 train_res = 28 train_res_end = 28 val_res = 28 world_size = 1 optimizer momentum target cpu
// CHECK-NEXT:    memplan.variant @train_base batch = 4 res = 28 max_res = 28 channels = 1
// CHECK-NEXT:    memplan.variant @train_last batch = 2 res = 28 max_res = 28 channels = 1
// CHECK-NEXT:    memplan.variant @train_lowres batch = 4 res = 28 max_res = 28 channels = 1
// CHECK-NEXT:    memplan.variant @train_lowres_last batch = 2 res = 28 max_res = 28 channels = 1
// CHECK-NEXT:    memplan.variant @val_base batch = 4 res = 28 max_res = 28 channels = 1
// CHECK-NEXT:    memplan.variant @val_last batch = 1 res = 28 max_res = 28 channels = 1
// CHECK-NEXT:    memplan.descs 0 "arch.flatten" names = ["flatten_output"] regions = ["F_FEATURE_FP32"] dtypes = ["f32"] shapes = [4, 1, 1, 784, 2, 1, 1, 784, 4, 1, 1, 784, 2, 1, 1, 784, 4, 1, 1, 784, 1, 1, 1, 784]
// CHECK-NEXT:    memplan.descs 1 "arch.fc" names = ["fc_weight", "fc_bias", "fc_output", "fc_weight_grad", "fc_bias_grad", "fc_amp_w_fp16", "fc_amp_g_fp16"] regions = ["W_FC_WEIGHT", "W_FC_BIAS", "F_FEATURE_FP32", "G_FC_WEIGHT", "G_FC_BIAS", "A_FC_WEIGHT", "G_FC_WEIGHT_FP16"] dtypes = ["f32", "f32", "f32", "f32", "f32", "f16", "f16"] shapes = [32, 1, 1, 784, 1, 1, 1, 32, 4, 1, 1, 32,
// CHECK-NEXT:    memplan.descs 2 "arch.relu" names = ["relu_output", "relu_output_grad"] regions = ["F_FEATURE_FP32", "F_GRAD_SLOT_FP32"] dtypes = ["f32", "f32"]
// CHECK-NEXT:    memplan.descs 3 "arch.fc"
// CHECK-NEXT:    memplan.descs 4 "arch.softmax_ce" names = ["ce_output", "softmax_probs", "pred_labels", "inv_scaling_factor", "loss_partial", "top1_partial", "top5_partial"]
// CHECK-NEXT:  }
// The FC reads a spatial map: a lowres variant would change its weight shape (fourth check).
// LOWRES: layer 1 ('arch.fc') tensor 'fc_weight': parameter shape differs across variants: [32, 1, 1, 784] in train_base, [32, 1, 1, 196] in train_lowres; parameter shapes must not depend on the resolution (e.g. put a gap before the fc)
arch.model @mlp input(28, 28, 1) num_classes = 10 first_layer = 0 {
^bb0(%x: tensor<?x28x28x1xf32>):
  %0 = arch.flatten %x : tensor<?x28x28x1xf32> -> tensor<?x1x1x784xf32>
  %1 = arch.fc %0 out_features = 32 bias : tensor<?x1x1x784xf32> -> tensor<?x1x1x32xf32>
  %2 = arch.relu %1 : tensor<?x1x1x32xf32> -> tensor<?x1x1x32xf32>
  %3 = arch.fc %2 out_features = 10 bias : tensor<?x1x1x32xf32> -> tensor<?x1x1x10xf32>
  %4 = arch.softmax_ce %3 num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %4 : tensor<?x1x1x10xf32>
}

// -----

// A value read by two layers gets a gradient slot and a partial slot; the lowres variants really
// run at their resolution (14 x 14 after the 3x3 conv with train_res_end = 14). The identity does
// not read its input in backward, so the ReLU keeps its mask.
// CHECK-LABEL: memplan.program for @two_uses {
// CHECK:         memplan.descs 1 "arch.relu" names = ["relu_output", "relu_mask", "relu_output_grad", "relu_output_grad_part"] regions = ["F_FEATURE_FP32", "S_MASK", "F_GRAD_SLOT_FP32", "F_GRAD_SLOT_FP32"]
// CHECK:         memplan.descs 4 "arch.add" names = ["add_output"]
// LOWRES-LABEL:  memplan.program for @two_uses {
// LOWRES:          memplan.descs 0 "arch.conv" names = ["conv_weight", "conv_output", {{.*}} "ws_col", "ws_tmp", "ws_wbuf"] {{.*}} shapes = [8, 3, 3, 8, 4, 28, 28, 8, {{.*}}, 8, 3, 3, 8, 4, 14, 14, 8,
arch.model @two_uses input(28, 28, 8) num_classes = 8 {
^bb0(%x: tensor<?x28x28x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x28x28x8xf32> -> tensor<?x28x28x8xf32>
  %1 = arch.relu %0 : tensor<?x28x28x8xf32> -> tensor<?x28x28x8xf32>
  %2 = arch.conv %1 out_ch = 8 k = 3 p = 1 : tensor<?x28x28x8xf32> -> tensor<?x28x28x8xf32>
  %3 = arch.identity %1 : tensor<?x28x28x8xf32> -> tensor<?x28x28x8xf32>
  %4 = arch.add %3, %2 : tensor<?x28x28x8xf32>, tensor<?x28x28x8xf32> -> tensor<?x28x28x8xf32>
  %5 = arch.gap %4 : tensor<?x28x28x8xf32> -> tensor<?x1x1x8xf32>
  %6 = arch.softmax_ce %5 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %6 : tensor<?x1x1x8xf32>
}

// -----

// The form of each ReLU: one feeding only layers whose backward reads their input (two convs, a
// tanh) keeps no mask and gets a gradient slot; one feeding a max pool keeps its mask.
// CHECK-LABEL: memplan.program for @relu_forms {
// CHECK:         memplan.descs 1 "arch.relu" names = ["relu_output", "relu_output_grad", "relu_output_grad_part"] regions = ["F_FEATURE_FP32", "F_GRAD_SLOT_FP32", "F_GRAD_SLOT_FP32"]
// CHECK:         memplan.descs 5 "arch.relu" names = ["relu_output", "relu_mask"] regions = ["F_FEATURE_FP32", "S_MASK"]
// CHECK:         memplan.descs 7 "arch.relu" names = ["relu_output", "relu_output_grad"] regions = ["F_FEATURE_FP32", "F_GRAD_SLOT_FP32"]
// CHECK:         memplan.descs 8 "arch.tanh" names = ["tanh_output"] regions
arch.model @relu_forms input(8, 8, 8) num_classes = 8 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %1 = arch.relu %0 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %2 = arch.conv %1 out_ch = 8 k = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %3 = arch.conv %1 out_ch = 8 k = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %4 = arch.add %2, %3 : tensor<?x8x8x8xf32>, tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %5 = arch.relu %4 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %6 = arch.maxpool %5 k = 2 s = 2 p = 0 : tensor<?x8x8x8xf32> -> tensor<?x4x4x8xf32>
  %7 = arch.relu %6 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %8 = arch.tanh %7 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %9 = arch.gap %8 : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %10 = arch.softmax_ce %9 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %10 : tensor<?x1x1x8xf32>
}

// -----

// CHECK: 'arch.relu' op cannot be the first layer: it must be flatten, conv, channel_padding or cbr (the first layer reads the input buffers A/B)
arch.model @relu_first input(4, 4, 8) num_classes = 8 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.relu %x : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.gap %0 : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %2 = arch.softmax_ce %1 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %2 : tensor<?x1x1x8xf32>
}

// -----

// CHECK: 'arch.add' op reads the model input, but only the first layer may (the input lives in the A/B buffers)
arch.model @input_twice input(4, 4, 8) num_classes = 8 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.add %x, %0 : tensor<?x4x4x8xf32>, tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %2 = arch.gap %1 : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %3 = arch.softmax_ce %2 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %3 : tensor<?x1x1x8xf32>
}

// -----

// CHECK: 'arch.bn2d' op eps = 0.001, momentum = 0.1 differs from eps = 1e-05, momentum = 0.1 of the first batch norm ('arch.bn2d'); all batch norms must share eps and momentum (one pair of BN scalars)
arch.model @bn_eps input(4, 4, 8) num_classes = 8 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.bn2d %0 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %2 = arch.bn2d %1 eps = 1.0e-03 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %3 = arch.gap %2 : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %4 = arch.softmax_ce %3 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %4 : tensor<?x1x1x8xf32>
}

// -----

// CHECK: 'arch.bn2d' op BN AMP requires input channels to be a multiple of 8, got 4; insert channel_padding() (variant train_base, resolution 4)
arch.model @amp_bn input(4, 4, 8) num_classes = 4 amp {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.conv %x out_ch = 4 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x4xf32>
  %1 = arch.bn2d %0 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %2 = arch.gap %1 : tensor<?x4x4x4xf32> -> tensor<?x1x1x4xf32>
  %3 = arch.softmax_ce %2 num_classes = 4 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  arch.output %3 : tensor<?x1x1x4xf32>
}

// -----

// A batch norm over one value per channel in a training variant (train_size 9 at batch 4 leaves a
// last batch of one; a BN1d after an FC sees 1 value per channel): refused, as PyTorch does.
// With train_size 10 (last batch 2) the same model compiles.
// BN1: 'arch.bn1d' op would normalize over a single value per channel in the training variant train_last (batch 1, 1x1 map): its variance is zero
// CHECK-LABEL: memplan.program for @bn_one
arch.model @bn_one input(2, 2, 1) num_classes = 8 first_layer = 0 {
^bb0(%x: tensor<?x2x2x1xf32>):
  %0 = arch.flatten %x : tensor<?x2x2x1xf32> -> tensor<?x1x1x4xf32>
  %1 = arch.fc %0 out_features = 8 bias : tensor<?x1x1x4xf32> -> tensor<?x1x1x8xf32>
  %2 = arch.bn1d %1 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %3 = arch.softmax_ce %2 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %3 : tensor<?x1x1x8xf32>
}

// -----

// A non-square input (4x8): every variant keeps the aspect ratio and records its width; on the
// LOWRES line (train_res_end = 14) the lowres variants run at 14x28 (14 * 8 / 4), which also sizes
// the input buffers (max_res, max_width).
// CHECK-LABEL: memplan.program for @wide
// CHECK:         memplan.variant @train_base batch = 4 res = 4 width = 8 max_res = 4 max_width = 8 channels = 2
// LOWRES-LABEL: memplan.program for @wide
// LOWRES:         memplan.variant @train_base batch = 4 res = 4 width = 8 max_res = 14 max_width = 28 channels = 2
// LOWRES:         memplan.variant @train_lowres batch = 4 res = 14 width = 28 max_res = 14 max_width = 28 channels = 2
arch.model @wide input(4, 8, 2) num_classes = 4 first_layer = 0 {
^bb0(%x: tensor<?x4x8x2xf32>):
  %0 = arch.conv %x out_ch = 4 k = 3 p = 1 : tensor<?x4x8x2xf32> -> tensor<?x4x8x4xf32>
  %1 = arch.gap %0 : tensor<?x4x8x4xf32> -> tensor<?x1x1x4xf32>
  %2 = arch.softmax_ce %1 num_classes = 4 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  arch.output %2 : tensor<?x1x1x4xf32>
}
