// The plugin of docs/fusion-tutorial.md (examples/plugins/conv_relu.py), loaded by tr-opt.
// RUN: tr-opt --load-plugin %plugins/conv_relu.py %s -p arch-merge-conv-relu --split-input-file | filecheck %s
// RUN: tr-opt --load-plugin %plugins/conv_relu.py %s -p arch-merge-conv-relu --split-input-file --print-op-generic | tr-opt --load-plugin %plugins/conv_relu.py --split-input-file | filecheck %s
// RUN: tr-opt --load-plugin %plugins/conv_relu.py %s -p 'arch-plan{fuse=true}' --split-input-file | filecheck %s --check-prefix=PLAN
// RUN: tr-opt --load-plugin %plugins/conv_relu.py %s -p 'arch-plan{fuse=true skip="arch-merge-conv-relu"}' --split-input-file | filecheck %s --check-prefix=SKIP
// RUN: not tr-opt %s -p arch-merge-conv-relu --split-input-file 2>&1 | filecheck %s --check-prefix=NOPLUGIN
// RUN: not tr-opt --load-plugin %plugins/missing.py %s 2>&1 | filecheck %s --check-prefix=MISSING

// NOPLUGIN: tr-opt: error: invalid pass pipeline: Unrecognized passes: ['arch-merge-conv-relu']
// MISSING: tr-opt: error: plugin '{{.*}}missing.py': no such file

// conv -> relu on the model input: fused (a conv may be the first layer), the conv's properties kept.
// CHECK-LABEL: arch.model @first_layer
// CHECK:         %[[A:.*]] = arch.conv_relu %{{.*}} out_ch = 8 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x8xf32>
// CHECK-NEXT:    %[[B:.*]] = arch.conv_relu %[[A]] out_ch = 8 k = 3 s = 2 groups = 8 : tensor<?x8x8x8xf32> -> tensor<?x3x3x8xf32>
// CHECK-NEXT:    arch.gap %[[B]]
// PLAN-LABEL: arch.model @first_layer
// PLAN:         arch.conv_relu
// PLAN-NEXT:    arch.conv_relu
// PLAN-NEXT:    arch.gap_fc
// SKIP-LABEL: arch.model @first_layer
// SKIP-NOT:     arch.conv_relu
// SKIP:         arch.conv
// SKIP-NEXT:    arch.relu
arch.model @first_layer input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %c = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x8xf32>
  %r = arch.relu %c : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %c2 = arch.conv %r out_ch = 8 k = 3 s = 2 groups = 8 : tensor<?x8x8x8xf32> -> tensor<?x3x3x8xf32>
  %r2 = arch.relu %c2 : tensor<?x3x3x8xf32> -> tensor<?x3x3x8xf32>
  %g = arch.gap %r2 : tensor<?x3x3x8xf32> -> tensor<?x1x1x8xf32>
  %f = arch.fc %g out_features = 10 bias : tensor<?x1x1x8xf32> -> tensor<?x1x1x10xf32>
  %l = arch.softmax_ce %f num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %l : tensor<?x1x1x10xf32>
}

// -----

// conv -> bn -> relu is arch-merge-triple's (it runs first in arch-plan): an arch.cbr, not a conv_relu.
// CHECK-LABEL: arch.model @with_bn
// CHECK-NOT:     arch.conv_relu
// PLAN-LABEL: arch.model @with_bn
// PLAN:         arch.cbr
// PLAN-NOT:     arch.conv_relu
arch.model @with_bn input(8, 8, 8) num_classes = 8 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %c = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %b = arch.bn2d %c : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %r = arch.relu %b : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %g = arch.gap %r : tensor<?x8x8x8xf32> -> tensor<?x1x1x8xf32>
  %f = arch.fc %g out_features = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %l = arch.softmax_ce %f num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %l : tensor<?x1x1x8xf32>
}

// -----

// The conv result has a second user: nothing fuses.
// CHECK-LABEL: arch.model @conv_extra_user
// CHECK-NOT:     arch.conv_relu
// CHECK:         arch.conv
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.add
arch.model @conv_extra_user input(4, 4, 8) num_classes = 8 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %c = arch.conv %x out_ch = 8 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %r = arch.relu %c : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %a = arch.add %c, %r : tensor<?x4x4x8xf32>, tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %g = arch.gap %a : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %f = arch.fc %g out_features = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  %l = arch.softmax_ce %f num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %l : tensor<?x1x1x8xf32>
}
