// RUN: tr-opt %s -p arch-mark-first-layer --split-input-file | filecheck %s

// Layer 0 is the first layer, whatever its kind (here a flatten).
// CHECK-LABEL: arch.model @marks_index_zero input(28, 28, 1) num_classes = 10 first_layer = 0 {
arch.model @marks_index_zero input(28, 28, 1) num_classes = 10 {
^bb0(%x: tensor<?x28x28x1xf32>):
  %f = arch.flatten %x : tensor<?x28x28x1xf32> -> tensor<?x1x1x784xf32>
  %y = arch.fc %f out_features = 10 bias : tensor<?x1x1x784xf32> -> tensor<?x1x1x10xf32>
  arch.output %y : tensor<?x1x1x10xf32>
}

// -----

// A stale mark is reset to 0.
// CHECK-LABEL: arch.model @resets_a_stale_mark input(4, 4, 3) num_classes = 3 first_layer = 0 {
arch.model @resets_a_stale_mark input(4, 4, 3) num_classes = 3 first_layer = 1 {
^bb0(%x: tensor<?x4x4x3xf32>):
  %r = arch.relu %x : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %t = arch.tanh %r : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  arch.output %t : tensor<?x4x4x3xf32>
}

// -----

// An empty body has no first layer: the mark is removed.
// CHECK-LABEL: arch.model @empty input(1, 1, 3) num_classes = 3 {
// CHECK-NOT:     first_layer
arch.model @empty input(1, 1, 3) num_classes = 3 {
^bb0(%x: tensor<?x1x1x3xf32>):
  arch.output %x : tensor<?x1x1x3xf32>
}

// -----

// Every model of the module is marked; the amp/fuse flags are untouched.
// CHECK-LABEL: arch.model @first input(4, 4, 3) num_classes = 3 amp fuse first_layer = 0 {
// CHECK-LABEL: arch.model @second input(4, 4, 3) num_classes = 3 first_layer = 0 {
arch.model @first input(4, 4, 3) num_classes = 3 amp fuse {
^bb0(%x: tensor<?x4x4x3xf32>):
  %r = arch.relu %x : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  arch.output %r : tensor<?x4x4x3xf32>
}
arch.model @second input(4, 4, 3) num_classes = 3 {
^bb0(%x: tensor<?x4x4x3xf32>):
  %r = arch.relu %x : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  arch.output %r : tensor<?x4x4x3xf32>
}
