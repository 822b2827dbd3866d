// RUN: tr-opt %s --split-input-file --verify-diagnostics -p arch-normalize-flatten | filecheck %s

// The MLP of facts 7(b) at 28x28x1: the first fc reads a spatial map with C % 8 != 0, so a
// flatten is inserted before it (it becomes the first layer). Shapes are deduced.

// CHECK-LABEL: arch.model @mlp
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x28x28x1xf32>):
// CHECK-NEXT:    %[[F:.*]] = arch.flatten %[[X]] : tensor<?x28x28x1xf32> -> tensor<?x1x1x784xf32>
// CHECK-NEXT:    %[[A:.*]] = arch.fc %[[F]] out_features = 32 bias : tensor<?x1x1x784xf32> -> tensor<?x1x1x32xf32>
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.fc {{.*}} : tensor<?x1x1x32xf32> -> tensor<?x1x1x10xf32>
// CHECK-NEXT:    arch.softmax_ce
// CHECK-NOT:     arch.flatten
arch.model @mlp input(28, 28, 1) num_classes = 10 {
^bb0(%x: tensor<?x28x28x1xf32>):
  %0 = arch.fc %x out_features = 32 bias : tensor<?x28x28x1xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.relu %0 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %2 = arch.fc %1 out_features = 10 bias : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %3 = arch.softmax_ce %2 num_classes = 10 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %3 : tensor<?x?x?x?xf32>
}

// -----

// C a multiple of 8: the fc reads the map directly (facts 7(b)); no flatten is inserted.

// CHECK-LABEL: arch.model @fc_reads_map
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x28x28x8xf32>):
// CHECK-NEXT:    arch.fc %[[X]] out_features = 10 : tensor<?x28x28x8xf32> -> tensor<?x1x1x10xf32>
// CHECK-NEXT:    arch.softmax_ce
arch.model @fc_reads_map input(28, 28, 8) num_classes = 10 {
^bb0(%x: tensor<?x28x28x8xf32>):
  %0 = arch.fc %x out_features = 10 : tensor<?x28x28x8xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.softmax_ce %0 num_classes = 10 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %1 : tensor<?x?x?x?xf32>
}

// -----

// A user's flatten that is the first layer is kept: the first layer must be a flatten, conv,
// channel_padding or cbr, and without it the fc would be first. At 1x1x5 (not spatial) and at
// 28x28x8 (C % 8 == 0) the rule would not put it back; a second flatten is removed.

// CHECK-LABEL: arch.model @first_layer_flatten_1x1
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x1x1x5xf32>):
// CHECK-NEXT:    %[[F:.*]] = arch.flatten %[[X]] : tensor<?x1x1x5xf32> -> tensor<?x1x1x5xf32>
// CHECK-NEXT:    arch.fc %[[F]] out_features = 10 : tensor<?x1x1x5xf32> -> tensor<?x1x1x10xf32>
// CHECK-NEXT:    arch.softmax_ce
// CHECK-LABEL: arch.model @first_layer_flatten_c8
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x28x28x8xf32>):
// CHECK-NEXT:    %[[F:.*]] = arch.flatten %[[X]] : tensor<?x28x28x8xf32> -> tensor<?x1x1x6272xf32>
// CHECK-NEXT:    %[[R:.*]] = arch.relu %[[F]] : tensor<?x1x1x6272xf32> -> tensor<?x1x1x6272xf32>
// CHECK-NEXT:    arch.fc %[[R]] out_features = 10 : tensor<?x1x1x6272xf32> -> tensor<?x1x1x10xf32>
// CHECK-NEXT:    arch.softmax_ce
// CHECK-NOT:     arch.flatten
builtin.module {
  arch.model @first_layer_flatten_1x1 input(1, 1, 5) num_classes = 10 {
  ^bb0(%x: tensor<?x1x1x5xf32>):
    %0 = arch.flatten %x : tensor<?x1x1x5xf32> -> tensor<?x?x?x?xf32>
    %1 = arch.fc %0 out_features = 10 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    %2 = arch.softmax_ce %1 num_classes = 10 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    arch.output %2 : tensor<?x?x?x?xf32>
  }
  arch.model @first_layer_flatten_c8 input(28, 28, 8) num_classes = 10 {
  ^bb0(%x: tensor<?x28x28x8xf32>):
    %0 = arch.flatten %x : tensor<?x28x28x8xf32> -> tensor<?x1x1x6272xf32>
    %1 = arch.relu %0 : tensor<?x1x1x6272xf32> -> tensor<?x1x1x6272xf32>
    %2 = arch.flatten %1 : tensor<?x1x1x6272xf32> -> tensor<?x1x1x6272xf32>
    %3 = arch.fc %2 out_features = 10 : tensor<?x1x1x6272xf32> -> tensor<?x1x1x10xf32>
    %4 = arch.softmax_ce %3 num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
    arch.output %4 : tensor<?x1x1x10xf32>
  }
}

// -----

// The rule reads true shapes after the deletion (the seed reads stale ones): in
// `conv(6), flatten(), relu(), fc` the fc would read 8x8x6, so a flatten goes right before it.

// CHECK-LABEL: arch.model @stale_shapes
// CHECK:         arch.conv {{.*}} -> tensor<?x8x8x6xf32>
// CHECK-NEXT:    %[[R:.*]] = arch.relu {{.*}} : tensor<?x8x8x6xf32> -> tensor<?x8x8x6xf32>
// CHECK-NEXT:    %[[F:.*]] = arch.flatten %[[R]] : tensor<?x8x8x6xf32> -> tensor<?x1x1x384xf32>
// CHECK-NEXT:    arch.fc %[[F]]
arch.model @stale_shapes input(12, 12, 1) num_classes = 10 {
^bb0(%x: tensor<?x12x12x1xf32>):
  %0 = arch.conv %x out_ch = 6 k = 5 : tensor<?x12x12x1xf32> -> tensor<?x8x8x6xf32>
  %1 = arch.flatten %0 : tensor<?x8x8x6xf32> -> tensor<?x1x1x384xf32>
  %2 = arch.relu %1 : tensor<?x1x1x384xf32> -> tensor<?x1x1x384xf32>
  %3 = arch.fc %2 out_features = 10 : tensor<?x1x1x384xf32> -> tensor<?x1x1x10xf32>
  %4 = arch.softmax_ce %3 num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %4 : tensor<?x1x1x10xf32>
}

// -----

// Only the first fc is a target; only its operand is rewired (the gap keeps the map).

// CHECK-LABEL: arch.model @first_fc_only
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x4x4x1xf32>):
// CHECK-NEXT:    %[[R:.*]] = arch.relu %[[X]]
// CHECK-NEXT:    %[[G:.*]] = arch.gap %[[R]] : tensor<?x4x4x1xf32> -> tensor<?x1x1x1xf32>
// CHECK-NEXT:    %[[F:.*]] = arch.flatten %[[R]] : tensor<?x4x4x1xf32> -> tensor<?x1x1x16xf32>
// CHECK-NEXT:    %[[FC:.*]] = arch.fc %[[F]] out_features = 1 :
// CHECK-NEXT:    %[[A:.*]] = arch.add %[[G]], %[[FC]] : tensor<?x1x1x1xf32>, tensor<?x1x1x1xf32> -> tensor<?x1x1x1xf32>
// CHECK-NEXT:    arch.fc %[[A]] out_features = 2 : tensor<?x1x1x1xf32> -> tensor<?x1x1x2xf32>
// CHECK-NEXT:    arch.softmax_ce
// CHECK-NOT:     arch.flatten
arch.model @first_fc_only input(4, 4, 1) num_classes = 2 {
^bb0(%x: tensor<?x4x4x1xf32>):
  %0 = arch.relu %x : tensor<?x4x4x1xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.gap %0 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %2 = arch.fc %0 out_features = 1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %3 = arch.add %1, %2 : tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %4 = arch.fc %3 out_features = 2 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %5 = arch.softmax_ce %4 num_classes = 2 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %5 : tensor<?x?x?x?xf32>
}

// -----

// No fc: the softmax_ce is the target; a spatial input is flattened (2x2x5 -> 20 classes).
// gap_fc is not an fc, and its 1x1 output needs nothing.

// CHECK-LABEL: arch.model @softmax_target
// CHECK:         arch.conv {{.*}} -> tensor<?x2x2x5xf32>
// CHECK-NEXT:    arch.flatten {{.*}} : tensor<?x2x2x5xf32> -> tensor<?x1x1x20xf32>
// CHECK-NEXT:    arch.softmax_ce {{.*}} : tensor<?x1x1x20xf32> -> tensor<?x1x1x20xf32>
// CHECK-LABEL: arch.model @gap_fc
// CHECK-NOT:     arch.flatten
// CHECK:         arch.gap_fc {{.*}} -> tensor<?x1x1x10xf32>
// CHECK-NEXT:    arch.softmax_ce
builtin.module {
  arch.model @softmax_target input(2, 2, 3) num_classes = 20 {
  ^bb0(%x: tensor<?x2x2x3xf32>):
    %0 = arch.conv %x out_ch = 5 k = 1 : tensor<?x2x2x3xf32> -> tensor<?x?x?x?xf32>
    %1 = arch.softmax_ce %0 num_classes = 20 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    arch.output %1 : tensor<?x?x?x?xf32>
  }
  arch.model @gap_fc input(7, 7, 3) num_classes = 10 {
  ^bb0(%x: tensor<?x7x7x3xf32>):
    %0 = arch.gap_fc %x out_features = 10 : tensor<?x7x7x3xf32> -> tensor<?x?x?x?xf32>
    %1 = arch.softmax_ce %0 num_classes = 10 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    arch.output %1 : tensor<?x?x?x?xf32>
  }
}

// -----

// A final conv giving 8x8x10 with num_classes 10: the flatten makes C = 640 (the seed's
// verified error case).

// CHECK: 'arch.softmax_ce' op expected input C = num_classes = 10, got C = 640; the last layer must produce 10 logits
arch.model @too_many_logits input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %0 = arch.conv %x out_ch = 10 k = 1 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.softmax_ce %0 num_classes = 10 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %1 : tensor<?x?x?x?xf32>
}

// -----

// Shape errors before the target surface as they do in arch-deduce-shapes.

// CHECK: 'arch.maxpool' op expected pool window size 3 <= padded input size 2 + 2*0; use a smaller pool window or more padding
arch.model @bad_geometry input(2, 2, 3) num_classes = 10 {
^bb0(%x: tensor<?x2x2x3xf32>):
  %0 = arch.maxpool %x k = 3 s = 1 : tensor<?x2x2x3xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.fc %0 out_features = 10 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %1 : tensor<?x?x?x?xf32>
}

// -----

// CHECK: 'arch.seq' op is tree form, but arch-normalize-flatten needs the flat graph; run arch-expand first
arch.model @tree input(4, 4, 3) num_classes = 10 {
^bb0(%x: tensor<?x4x4x3xf32>):
  %s = arch.seq %x : tensor<?x4x4x3xf32> -> tensor<?x?x?x?xf32> {
  ^bb0(%i: tensor<?x4x4x3xf32>):
    arch.yield %i : tensor<?x4x4x3xf32>
  }
  arch.output %s : tensor<?x?x?x?xf32>
}
