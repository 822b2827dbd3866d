// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-share-variants,memplan-build-atlas,memplan-skip-dead-outputs' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-share-variants,memplan-build-atlas,memplan-skip-dead-outputs,memplan-skip-dead-outputs' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=6},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-skip-dead-outputs' | filecheck %s --check-prefix=NOATLAS

// The MLP: the first layer is the flatten of the input, so the first FC (layer 1, node 7 of
// deep_fwd_bwd, FC_FP32_BWD) writes its input gradient into the flatten output (23), which only
// the no-op FLATTEN_FP32_BWD_FIRST_LAYER would read: output 0 (dx) is dead and marked skipped.
// The second FC's dx (node 5, into the ReLU output's gradient slot 34) is read by the ReLU
// backward and stays. A rerun of the pass gives the same marks (second RUN line).
// CHECK-LABEL: memplan.graph @train
// CHECK:         memplan.nodes deep_fwd_bwd ops = [{{.*}}"FC_FP32_BWD", "RELU_FP32_BWD_FROM_OUTPUT", "FC_FP32_BWD"] {{.*}} params = [1, -1, 2, 3, 3, 2, -1, 1] {skip_outputs = array<i64: 7, 0>}
// CHECK-NEXT:    memplan.nodes zero_grad
// CHECK-NOT:     skip_outputs
// CHECK:         memplan.graph @infer
// CHECK-NOT:     skip_outputs
// CHECK:         memplan.atlas
// NOATLAS: 'arch.model' op @mlp: memplan-skip-dead-outputs needs the program's graphs and atlas; run memplan-build-atlas first (or memplan-compile)

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

// A conv first layer computes no input gradient (CONV_FP32_BWD_FIRST_LAYER): the deep BN's dx is
// the conv backward's dy, read, so nothing is skipped.
// CHECK-LABEL: memplan.graph @train
// CHECK-NOT:     skip_outputs
// CHECK:         memplan.atlas
// NOATLAS: 'arch.model' op @convfirst: memplan-skip-dead-outputs needs the program's graphs and atlas
arch.model @convfirst input(4, 4, 8) num_classes = 3 first_layer = 0 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 3 s = 1 p = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.bn2d %0 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %2 = arch.gap %1 : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %3 = arch.fc %2 out_features = 3 bias : tensor<?x1x1x8xf32> -> tensor<?x1x1x3xf32>
  %4 = arch.softmax_ce %3 num_classes = 3 : tensor<?x1x1x3xf32> -> tensor<?x1x1x3xf32>
  arch.output %4 : tensor<?x1x1x3xf32>
}

// -----

// Channel padding first: its backward (CHANNEL_PADDING_FP32_BWD_FIRST_LAYER) reads nothing, so the
// deep conv's input gradient (node 9, CONV_FP32_BWD output 0) is dead and skipped; the BN
// backward's dx (node 8) feeds the conv backward and stays.
// CHECK-LABEL: memplan.graph @train
// CHECK:         memplan.nodes deep_fwd_bwd ops = [{{.*}}"BN2D_FP32_BWD", "CONV_FP32_BWD"] {{.*}} {skip_outputs = array<i64: 9, 0>}
// CHECK-NOT:     skip_outputs
// CHECK:         memplan.atlas
// NOATLAS: 'arch.model' op @padconv: memplan-skip-dead-outputs needs the program's graphs and atlas
arch.model @padconv input(4, 4, 2) num_classes = 3 first_layer = 0 {
^bb0(%x: tensor<?x4x4x2xf32>):
  %0 = arch.channel_padding %x : tensor<?x4x4x2xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.conv %0 out_ch = 8 k = 3 s = 1 p = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %2 = arch.bn2d %1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %3 = arch.gap %2 : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %4 = arch.fc %3 out_features = 3 bias : tensor<?x1x1x8xf32> -> tensor<?x1x1x3xf32>
  %5 = arch.softmax_ce %4 num_classes = 3 : tensor<?x1x1x3xf32> -> tensor<?x1x1x3xf32>
  arch.output %5 : tensor<?x1x1x3xf32>
}
