// RUN: tr-opt %s -p arch-merge-binary --split-input-file | filecheck %s

// gap + fc -> gap_fc, bias kept, the fc's result type.
// CHECK-LABEL: arch.model @fuses_with_bias
// CHECK:         %[[G:.*]] = arch.gap_fc %{{.*}} out_features = 10 bias : tensor<?x7x7x64xf32> -> tensor<?x1x1x10xf32>
// CHECK-NEXT:    arch.softmax_ce %[[G]]
arch.model @fuses_with_bias input(7, 7, 64) num_classes = 10 {
^bb0(%x: tensor<?x7x7x64xf32>):
  %g = arch.gap %x : tensor<?x7x7x64xf32> -> tensor<?x1x1x64xf32>
  %f = arch.fc %g out_features = 10 bias : tensor<?x1x1x64xf32> -> tensor<?x1x1x10xf32>
  %l = arch.softmax_ce %f num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %l : tensor<?x1x1x10xf32>
}

// -----

// Without bias the flag stays off; the fc result may have several users.
// CHECK-LABEL: arch.model @fuses_without_bias
// CHECK:         %[[G:.*]] = arch.gap_fc %{{.*}} out_features = 4 : tensor<?x2x2x8xf32> -> tensor<?x1x1x4xf32>
// CHECK-NOT:     bias
// CHECK-NEXT:    arch.add %[[G]], %[[G]]
arch.model @fuses_without_bias input(2, 2, 8) num_classes = 4 {
^bb0(%x: tensor<?x2x2x8xf32>):
  %g = arch.gap %x : tensor<?x2x2x8xf32> -> tensor<?x1x1x8xf32>
  %f = arch.fc %g out_features = 4 : tensor<?x1x1x8xf32> -> tensor<?x1x1x4xf32>
  %a = arch.add %f, %f : tensor<?x1x1x4xf32>, tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  arch.output %a : tensor<?x1x1x4xf32>
}

// -----

// The gap result has a second user: nothing fuses.
// CHECK-LABEL: arch.model @gap_extra_user
// CHECK-NOT:     arch.gap_fc
// CHECK:         arch.gap
// CHECK-NEXT:    arch.fc
arch.model @gap_extra_user input(2, 2, 8) num_classes = 8 {
^bb0(%x: tensor<?x2x2x8xf32>):
  %g = arch.gap %x : tensor<?x2x2x8xf32> -> tensor<?x1x1x8xf32>
  %f = arch.fc %g out_features = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %a = arch.add %g, %f : tensor<?x1x1x8xf32>, tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %a : tensor<?x1x1x8xf32>
}

// -----

// Wrong kinds: something between gap and fc, an fc not after a gap.
// CHECK-LABEL: arch.model @wrong_kinds
// CHECK-NOT:     arch.gap_fc
// CHECK:         arch.gap
// CHECK-NEXT:    arch.dropout
// CHECK-NEXT:    arch.fc
// CHECK-NEXT:    arch.fc
arch.model @wrong_kinds input(2, 2, 8) num_classes = 8 {
^bb0(%x: tensor<?x2x2x8xf32>):
  %g = arch.gap %x : tensor<?x2x2x8xf32> -> tensor<?x1x1x8xf32>
  %d = arch.dropout %g p = 5.0e-01 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %f = arch.fc %d out_features = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %f2 = arch.fc %f out_features = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %f2 : tensor<?x1x1x8xf32>
}

// -----

// A pair inside a tree-form region is not part of the flat plan.
// CHECK-LABEL: arch.model @nested_region
// CHECK-NOT:     arch.gap_fc
// CHECK:         arch.gap
// CHECK-NEXT:    arch.fc
arch.model @nested_region input(2, 2, 8) num_classes = 8 {
^bb0(%x: tensor<?x2x2x8xf32>):
  %s = arch.seq %x : tensor<?x2x2x8xf32> -> tensor<?x1x1x8xf32> {
  ^bb1(%in: tensor<?x2x2x8xf32>):
    %g = arch.gap %in : tensor<?x2x2x8xf32> -> tensor<?x1x1x8xf32>
    %f = arch.fc %g out_features = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
    arch.yield %f : tensor<?x1x1x8xf32>
  }
  arch.output %s : tensor<?x1x1x8xf32>
}
