// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-name-parameters' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-name-parameters,memplan-name-parameters' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-name-parameters' | filecheck %s --check-prefix=NOPLANS
// RUN: tr-opt %s --split-input-file -p 'memplan-compile{batch_size=4 train_size=10 val_size=6}' | filecheck %s --check-prefix=COMPILE

// Conv, BN, conv, BN, an FC with a bias and one without: the conv weights number conv0, conv1 (the
// first conv's W_FIRST_CONV like the deep one's W_DEEP_CONV); each BN's gamma starts bn<j> and its
// beta, running mean and variance share it; the second FC's bias slot is planned but the op has
// no `bias`, so it is no parameter. Gradients, AMP copies, the folded W_EQ_* and the B_PREV_*
// copies have no name. A rerun writes the same names (second RUN line); memplan-compile runs the
// pass (COMPILE).
// CHECK-LABEL: memplan.program for @convnet
// CHECK:         memplan.descs 0 "arch.conv" names = ["conv_weight", {{.*}} param_names = ["conv0.weight", "", "", "", "", "", "", "", "", ""]
// CHECK-NEXT:    memplan.descs 1 "arch.bn2d" {{.*}} param_names = ["bn0.weight", "bn0.bias", "", "", "", "bn0.running_mean", "bn0.running_var", "", "", "", "", "", ""]
// CHECK-NEXT:    memplan.descs 2 "arch.relu" {{.*}} param_names = ["", ""]
// CHECK-NEXT:    memplan.descs 3 "arch.conv" {{.*}} param_names = ["conv1.weight", "", "", "", "", "", "", "", "", ""]
// CHECK-NEXT:    memplan.descs 4 "arch.bn2d" {{.*}} param_names = ["bn1.weight", "bn1.bias", "", "", "", "bn1.running_mean", "bn1.running_var", "", "", "", "", "", ""]
// CHECK-NEXT:    memplan.descs 5 "arch.gap" {{.*}} param_names = ["", ""]
// CHECK-NEXT:    memplan.descs 6 "arch.fc" {{.*}} param_names = ["fc0.weight", "fc0.bias", "", "", "", "", ""]
// CHECK-NEXT:    memplan.descs 7 "arch.fc" {{.*}} param_names = ["fc1.weight", "", "", "", "", "", ""]
// CHECK-NEXT:    memplan.descs 8 "arch.softmax_ce" {{.*}} param_names = ["", "", "", "", "", "", ""]
// NOPLANS: 'arch.model' op @convnet: memplan-name-parameters needs the program's plans; run memplan-create-plans first (or memplan-compile)
// COMPILE-LABEL: memplan.program for @convnet
// COMPILE:         memplan.descs 7 "arch.fc" {{.*}} param_names = ["fc1.weight", "", "", "", "", "", ""]
arch.model @convnet input(4, 4, 8) num_classes = 3 first_layer = 0 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 3 s = 1 p = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.bn2d %0 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %2 = arch.relu %1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %3 = arch.conv %2 out_ch = 8 k = 3 s = 1 p = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %4 = arch.bn2d %3 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %5 = arch.gap %4 : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %6 = arch.fc %5 out_features = 4 bias : tensor<?x1x1x8xf32> -> tensor<?x1x1x4xf32>
  %7 = arch.fc %6 out_features = 3 : tensor<?x1x1x4xf32> -> tensor<?x1x1x3xf32>
  %8 = arch.softmax_ce %7 num_classes = 3 : tensor<?x1x1x3xf32> -> tensor<?x1x1x3xf32>
  arch.output %8 : tensor<?x1x1x3xf32>
}

// -----

// A fused op names its parameters in its unfused order (conv, then BN: the cbr of arch-merge-triple),
// so fused and unfused compiles of one network show the same names.
// CHECK-LABEL: memplan.program for @fused
// CHECK:         memplan.descs 0 "arch.cbr" {{.*}} param_names = [{{.*}}"conv0.weight"{{.*}}"bn0.weight", "bn0.bias"{{.*}}"bn0.running_mean", "bn0.running_var"
// CHECK-NEXT:    memplan.descs 1 "arch.gap_fc" {{.*}} param_names = [{{.*}}"fc0.weight", "fc0.bias"
// NOPLANS: 'arch.model' op @fused: memplan-name-parameters needs the program's plans
// COMPILE-LABEL: memplan.program for @fused
arch.model @fused input(4, 4, 8) num_classes = 3 first_layer = 0 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.cbr %x out_ch = 8 k = 3 p = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.gap_fc %0 out_features = 3 bias : tensor<?x4x4x8xf32> -> tensor<?x1x1x3xf32>
  %2 = arch.softmax_ce %1 num_classes = 3 : tensor<?x1x1x3xf32> -> tensor<?x1x1x3xf32>
  arch.output %2 : tensor<?x1x1x3xf32>
}
