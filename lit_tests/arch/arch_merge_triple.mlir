// RUN: tr-opt %s -p arch-merge-triple --split-input-file | filecheck %s

// conv + bn2d + relu with single-use intermediates fuse; eps/momentum come from the bn2d,
// the conv geometry from the conv, the result type from the relu.
// CHECK-LABEL: arch.model @fuses
// CHECK:         %[[C:.*]] = arch.cbr %{{.*}} out_ch = 16 k = 3 s = 2 p = 1 eps = 1.000000e-03 momentum = 2.000000e-01 : tensor<?x8x8x3xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    arch.output %[[C]] : tensor<?x4x4x16xf32>
arch.model @fuses input(8, 8, 3) num_classes = 16 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %c = arch.conv %x out_ch = 16 k = 3 s = 2 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x4x4x16xf32>
  %b = arch.bn2d %c eps = 1.0e-03 momentum = 0.2 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %r = arch.relu %b : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  arch.output %r : tensor<?x4x4x16xf32>
}

// -----

// Default BN parameters print nothing; two triples in a row both fuse; other ops stay.
// CHECK-LABEL: arch.model @two_triples
// CHECK:         %[[A:.*]] = arch.cbr %{{.*}} out_ch = 8 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x8xf32>
// CHECK-NEXT:    %[[P:.*]] = arch.maxpool %[[A]] k = 2 s = 2
// CHECK-NEXT:    %[[B:.*]] = arch.cbr %[[P]] out_ch = 16 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    arch.output %[[B]]
arch.model @two_triples input(8, 8, 3) num_classes = 16 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %c = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x8xf32>
  %b = arch.bn2d %c : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %r = arch.relu %b : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %p = arch.maxpool %r k = 2 s = 2 : tensor<?x8x8x8xf32> -> tensor<?x4x4x8xf32>
  %c2 = arch.conv %p out_ch = 16 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x16xf32>
  %b2 = arch.bn2d %c2 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %r2 = arch.relu %b2 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  arch.output %r2 : tensor<?x4x4x16xf32>
}

// -----

// The relu's users are rewired (here: both operands of an add).
// CHECK-LABEL: arch.model @many_users_of_the_relu
// CHECK:         %[[A:.*]] = arch.cbr %{{.*}} out_ch = 3 k = 1
// CHECK-NEXT:    %{{.*}} = arch.add %[[A]], %[[A]]
arch.model @many_users_of_the_relu input(4, 4, 3) num_classes = 3 {
^bb0(%x: tensor<?x4x4x3xf32>):
  %c = arch.conv %x out_ch = 3 k = 1 : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %b = arch.bn2d %c : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %r = arch.relu %b : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %a = arch.add %r, %r : tensor<?x4x4x3xf32>, tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  arch.output %a : tensor<?x4x4x3xf32>
}

// -----

// The conv result has a second user (the add): nothing fuses.
// CHECK-LABEL: arch.model @conv_extra_user
// CHECK:         arch.conv
// CHECK-NEXT:    arch.bn2d
// CHECK-NEXT:    arch.relu
// CHECK-NOT:     arch.cbr
arch.model @conv_extra_user input(4, 4, 3) num_classes = 3 {
^bb0(%x: tensor<?x4x4x3xf32>):
  %c = arch.conv %x out_ch = 3 k = 1 : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %b = arch.bn2d %c : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %r = arch.relu %b : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %a = arch.add %c, %r : tensor<?x4x4x3xf32>, tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  arch.output %a : tensor<?x4x4x3xf32>
}

// -----

// The bn2d result has a second user: nothing fuses.
// CHECK-LABEL: arch.model @bn_extra_user
// CHECK:         arch.conv
// CHECK-NEXT:    arch.bn2d
// CHECK-NEXT:    arch.relu
// CHECK-NOT:     arch.cbr
arch.model @bn_extra_user input(4, 4, 3) num_classes = 3 {
^bb0(%x: tensor<?x4x4x3xf32>):
  %c = arch.conv %x out_ch = 3 k = 1 : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %b = arch.bn2d %c : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %r = arch.relu %b : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %a = arch.add %b, %r : tensor<?x4x4x3xf32>, tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  arch.output %a : tensor<?x4x4x3xf32>
}

// -----

// Wrong kinds: a grouped conv, a bn1d, a relu6 and a conv without bn do not fuse.
// CHECK-LABEL: arch.model @wrong_kinds
// CHECK-NOT:     arch.cbr
// CHECK:         arch.conv %{{.*}} groups = 4
// CHECK:         arch.relu6
// CHECK:         arch.bn1d
// CHECK:         arch.output
arch.model @wrong_kinds input(4, 4, 4) num_classes = 4 {
^bb0(%x: tensor<?x4x4x4xf32>):
  %c = arch.conv %x out_ch = 4 k = 3 p = 1 groups = 4 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %b = arch.bn2d %c : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %r = arch.relu %b : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %c2 = arch.conv %r out_ch = 4 k = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %b2 = arch.bn2d %c2 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %r2 = arch.relu6 %b2 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %c3 = arch.conv %r2 out_ch = 4 k = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %r3 = arch.relu %c3 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %f = arch.fc %r3 out_features = 4 : tensor<?x4x4x4xf32> -> tensor<?x1x1x4xf32>
  %b4 = arch.bn1d %f : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  %r4 = arch.relu %b4 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  arch.output %r4 : tensor<?x1x1x4xf32>
}

// -----

// Ops nested in a tree-form region are not part of the flat plan: they are left alone,
// while the flat chain after the region fuses.
// CHECK-LABEL: arch.model @nested_region
// CHECK:         arch.seq
// CHECK:           arch.conv
// CHECK-NEXT:      arch.bn2d
// CHECK-NEXT:      arch.relu
// CHECK-NEXT:      arch.yield
// CHECK:         arch.cbr
arch.model @nested_region input(4, 4, 3) num_classes = 3 {
^bb0(%x: tensor<?x4x4x3xf32>):
  %s = arch.seq %x : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32> {
  ^bb1(%in: tensor<?x4x4x3xf32>):
    %c = arch.conv %in out_ch = 3 k = 1 : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
    %b = arch.bn2d %c : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
    %r = arch.relu %b : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
    arch.yield %r : tensor<?x4x4x3xf32>
  }
  %c2 = arch.conv %s out_ch = 3 k = 1 : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %b2 = arch.bn2d %c2 : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %r2 = arch.relu %b2 : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  arch.output %r2 : tensor<?x4x4x3xf32>
}

// -----

// Shapes need not be deduced: the fused op keeps the relu's (dynamic) type.
// CHECK-LABEL: arch.model @dynamic_types
// CHECK:         arch.cbr %{{.*}} out_ch = 3 k = 1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
arch.model @dynamic_types input(4, 4, 3) num_classes = 3 {
^bb0(%x: tensor<?x?x?x?xf32>):
  %c = arch.conv %x out_ch = 3 k = 1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %b = arch.bn2d %c : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %r = arch.relu %b : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %r : tensor<?x?x?x?xf32>
}
