// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-compile{batch_size=4 train_size=8 val_size=4 reuse=false},memplan-assign-offsets' | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-compile{batch_size=4 train_size=8 val_size=4 reuse=false},memplan-assign-offsets{reuse=false}' | filecheck %s --check-prefix=SEED
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-derive-shapes{batch_size=4 train_size=8 val_size=4},memplan-max-slots,memplan-create-plans,memplan-build-graph,memplan-assign-offsets' | filecheck %s --check-prefix=NOATLAS

// conv -> relu -> relu -> gap -> softmax_ce. The transient DTensors go into one pool after the last
// region (pool = [offset, bytes]; the transient regions keep zero bytes), identical in the six plans.
// Live-range splitting: the gradient the first ReLU backward writes over the conv output, and the one
// the second writes over the first ReLU's output, become DTensors of their own (ids 45 and 46), so
// the forward values die at their last forward read.
// CHECK-LABEL: memplan.program for @net {
// CHECK:         memplan.plan @plan_train_base target cpu total_bytes = 27648 {{.*}} pool = [17920, 9728] {{.*}} "l1.relu_mask", "l2.relu_output", {{.*}} "l0.conv_output.v1", "l1.relu_output.v1"]
// Ids 24 (l0.conv_output: last read by the first ReLU forward) and 34 (l2.relu_output: written by
// the second ReLU forward) share offset 17920: their lifetimes are disjoint. Ids 32 and 33
// (l1.relu_output and l1.relu_mask, written by one node) are live together and kept apart.
// CHECK-SAME:    offsets = [{{(([0-9]+, ){24})}}17920, {{(([0-9]+, ){7})}}20480, 23040, 17920, {{(([0-9]+, ){10})}}17920, 20480]
// CHECK-COUNT-5: memplan.plan @plan_{{.*}} total_bytes = 27648 {{.*}} pool = [17920, 9728]
// The backward reads and writes the split ids; the forward nodes keep the originals.
// CHECK:         memplan.nodes deep_fwd_bwd ops = ["RELU_FP32_FWD", "RELU_FP32_FWD", {{.*}} "RELU_FP32_BWD", "RELU_FP32_BWD"] ins = [24, 32, {{.*}}, 46, 33] {{.*}} outs = [32, 33, 34, 35, {{.*}}, 46, 45] out_counts
// SEED-LABEL: memplan.program for @net {
// SEED-NOT:     pool =
// SEED-NOT:     .v1"
// SEED:         memplan.atlas
// NOATLAS: 'memplan.program' op has no plans, graphs or atlas; memplan-assign-offsets places a compiled program (run memplan-compile first)
arch.model @net input(4, 4, 8) num_classes = 8 first_layer = 0 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.relu %0 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %2 = arch.relu %1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %3 = arch.gap %2 : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %4 = arch.softmax_ce %3 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %4 : tensor<?x1x1x8xf32>
}

// -----

// A model whose every transient value is read by the next layer only (an MLP): the plan is smaller
// than the seed's (22528 bytes against 24064). memplan-fuse-fc-relu left the first FC's output
// holding only the gradient RELU_FC_BWD writes there, so no DTensor is split (without the fusion
// it is, at the same total: memplan_compile.mlir).
// CHECK-LABEL: memplan.program for @mlp {
// CHECK:         memplan.plan @plan_train_base target cpu total_bytes = 22528 {{.*}} pool = [{{[0-9]+}}, {{[0-9]+}}] {{.*}} "l4.top5_partial"] regions
// SEED-LABEL: memplan.program for @mlp {
// SEED:         memplan.plan @plan_train_base target cpu total_bytes = 24064 region_bases
arch.model @mlp input(2, 2, 2) num_classes = 3 first_layer = 0 {
^bb0(%x: tensor<?x2x2x2xf32>):
  %0 = arch.flatten %x : tensor<?x2x2x2xf32> -> tensor<?x1x1x8xf32>
  %1 = arch.fc %0 out_features = 4 bias : tensor<?x1x1x8xf32> -> tensor<?x1x1x4xf32>
  %2 = arch.relu %1 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  %3 = arch.fc %2 out_features = 3 : tensor<?x1x1x4xf32> -> tensor<?x1x1x3xf32>
  %4 = arch.softmax_ce %3 num_classes = 3 : tensor<?x1x1x3xf32> -> tensor<?x1x1x3xf32>
  arch.output %4 : tensor<?x1x1x3xf32>
}
