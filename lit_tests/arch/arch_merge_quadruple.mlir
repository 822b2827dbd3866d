// RUN: tr-opt %s -p arch-merge-quadruple --split-input-file | filecheck %s

// conv + bn2d + relu + maxpool -> cbrp: conv and pool geometry, eps/momentum of the bn2d,
// the maxpool's result type. The chains of these cases start after a relu: a chain that reads the
// model input does not fuse (@model_input, the last case).
// CHECK-LABEL: arch.model @fuses
// CHECK:         %[[C:.*]] = arch.cbrp %{{.*}} out_ch = 64 conv(7, 2, 3) pool(3, 2, 1) eps = 1.000000e-03 : tensor<?x32x32x3xf32> -> tensor<?x8x8x64xf32>
// CHECK-NEXT:    arch.output %[[C]] : tensor<?x8x8x64xf32>
arch.model @fuses input(32, 32, 3) num_classes = 64 {
^bb0(%in: tensor<?x32x32x3xf32>):
  %x = arch.relu %in : tensor<?x32x32x3xf32> -> tensor<?x32x32x3xf32>
  %c = arch.conv %x out_ch = 64 k = 7 s = 2 p = 3 : tensor<?x32x32x3xf32> -> tensor<?x16x16x64xf32>
  %b = arch.bn2d %c eps = 1.0e-03 : tensor<?x16x16x64xf32> -> tensor<?x16x16x64xf32>
  %r = arch.relu %b : tensor<?x16x16x64xf32> -> tensor<?x16x16x64xf32>
  %p = arch.maxpool %r k = 3 s = 2 p = 1 : tensor<?x16x16x64xf32> -> tensor<?x8x8x64xf32>
  arch.output %p : tensor<?x8x8x64xf32>
}

// -----

// The relu result also feeds the add: the quadruple does not fuse (arch-merge-triple would
// still fuse its conv + bn2d + relu).
// CHECK-LABEL: arch.model @relu_extra_user
// CHECK-NOT:     arch.cbrp
// CHECK:         arch.conv
// CHECK-NEXT:    arch.bn2d
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.maxpool
arch.model @relu_extra_user input(4, 4, 3) num_classes = 3 {
^bb0(%in: tensor<?x4x4x3xf32>):
  %x = arch.relu %in : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %c = arch.conv %x out_ch = 3 k = 1 : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %b = arch.bn2d %c : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %r = arch.relu %b : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %p = arch.maxpool %r k = 1 s = 1 : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %a = arch.add %r, %p : tensor<?x4x4x3xf32>, tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  arch.output %a : tensor<?x4x4x3xf32>
}

// -----

// The conv result has a second user: nothing fuses.
// CHECK-LABEL: arch.model @conv_extra_user
// CHECK-NOT:     arch.cbrp
// CHECK:         arch.maxpool
arch.model @conv_extra_user input(4, 4, 3) num_classes = 3 {
^bb0(%in: tensor<?x4x4x3xf32>):
  %x = arch.relu %in : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %c = arch.conv %x out_ch = 3 k = 1 : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %b = arch.bn2d %c : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %r = arch.relu %b : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %p = arch.maxpool %r k = 1 s = 1 : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %a = arch.add %c, %p : tensor<?x4x4x3xf32>, tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  arch.output %a : tensor<?x4x4x3xf32>
}

// -----

// Wrong kinds: an avgpool instead of the maxpool, a depthwise conv, a missing bn.
// CHECK-LABEL: arch.model @wrong_kinds
// CHECK-NOT:     arch.cbrp
// CHECK:         arch.avgpool
// CHECK:         arch.conv %{{.*}} groups = 4
// CHECK:         arch.maxpool
// CHECK:         arch.conv
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.maxpool
arch.model @wrong_kinds input(4, 4, 4) num_classes = 4 {
^bb0(%in: tensor<?x4x4x4xf32>):
  %x = arch.relu %in : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %c = arch.conv %x out_ch = 4 k = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %b = arch.bn2d %c : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %r = arch.relu %b : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %p = arch.avgpool %r k = 1 s = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %c2 = arch.conv %p out_ch = 4 k = 1 groups = 4 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %b2 = arch.bn2d %c2 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %r2 = arch.relu %b2 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %p2 = arch.maxpool %r2 k = 1 s = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %c3 = arch.conv %p2 out_ch = 4 k = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %r3 = arch.relu %c3 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %p3 = arch.maxpool %r3 k = 1 s = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  arch.output %p3 : tensor<?x4x4x4xf32>
}

// -----

// A chain inside a tree-form region is not part of the flat plan.
// CHECK-LABEL: arch.model @nested_region
// CHECK-NOT:     arch.cbrp
// CHECK:         arch.maxpool
arch.model @nested_region input(4, 4, 3) num_classes = 3 {
^bb0(%x: tensor<?x4x4x3xf32>):
  %s = arch.seq %x : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32> {
  ^bb1(%in: tensor<?x4x4x3xf32>):
    %c = arch.conv %in out_ch = 3 k = 1 : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
    %b = arch.bn2d %c : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
    %r = arch.relu %b : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
    %p = arch.maxpool %r k = 1 s = 1 : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
    arch.yield %p : tensor<?x4x4x3xf32>
  }
  arch.output %s : tensor<?x4x4x3xf32>
}

// -----

// A chain that reads the model input does not fuse: its conv is the first layer, which a cbrp
// cannot be (memplan-derive-shapes refuses it); arch-merge-triple makes the conv a cbr.
// CHECK-LABEL: arch.model @model_input
// CHECK-NOT:     arch.cbrp
// CHECK:         arch.conv %x
// CHECK-NEXT:    arch.bn2d
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.maxpool
arch.model @model_input input(4, 4, 3) num_classes = 3 {
^bb0(%x: tensor<?x4x4x3xf32>):
  %c = arch.conv %x out_ch = 3 k = 1 : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %b = arch.bn2d %c : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %r = arch.relu %b : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  %p = arch.maxpool %r k = 1 s = 1 : tensor<?x4x4x3xf32> -> tensor<?x4x4x3xf32>
  arch.output %p : tensor<?x4x4x3xf32>
}
