// RUN: tr-opt %s --split-input-file --verify-diagnostics -p arch-deduce-shapes | filecheck %s

// A chain: each layer's result type from its shape rule. The input argument takes its type
// from input(H, W, C); stale types are overwritten.

// CHECK-LABEL: arch.model @chain
// CHECK-NEXT:  ^{{.*}}(%{{.*}}: tensor<?x32x32x3xf32>):
// CHECK-NEXT:    arch.conv {{.*}} : tensor<?x32x32x3xf32> -> tensor<?x16x16x8xf32>
// CHECK-NEXT:    arch.bn2d {{.*}} : tensor<?x16x16x8xf32> -> tensor<?x16x16x8xf32>
// CHECK-NEXT:    arch.relu {{.*}} : tensor<?x16x16x8xf32> -> tensor<?x16x16x8xf32>
// CHECK-NEXT:    arch.maxpool {{.*}} : tensor<?x16x16x8xf32> -> tensor<?x8x8x8xf32>
// CHECK-NEXT:    arch.channel_padding {{.*}} : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
// CHECK-NEXT:    arch.avgpool {{.*}} : tensor<?x8x8x8xf32> -> tensor<?x4x4x8xf32>
// CHECK-NEXT:    arch.flatten {{.*}} : tensor<?x4x4x8xf32> -> tensor<?x1x1x128xf32>
// CHECK-NEXT:    arch.fc {{.*}} : tensor<?x1x1x128xf32> -> tensor<?x1x1x10xf32>
// CHECK-NEXT:    arch.softmax_ce {{.*}} : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
// CHECK-NEXT:    arch.output {{.*}} : tensor<?x1x1x10xf32>
arch.model @chain input(32, 32, 3) num_classes = 10 {
^bb0(%x: tensor<?x?x?x?xf32>):
  %0 = arch.conv %x out_ch = 8 k = 3 s = 2 p = 1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.bn2d %0 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %2 = arch.relu %1 : tensor<?x?x?x?xf32> -> tensor<?x7x7x7xf32>
  %3 = arch.maxpool %2 k = 2 s = 2 : tensor<?x7x7x7xf32> -> tensor<?x?x?x?xf32>
  %4 = arch.channel_padding %3 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %5 = arch.avgpool %4 k = 2 s = 2 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %6 = arch.flatten %5 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %7 = arch.fc %6 out_features = 10 bias : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %8 = arch.softmax_ce %7 num_classes = 10 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %8 : tensor<?x?x?x?xf32>
}

// -----

// Shapes follow the SSA graph through residual joins (no linear walk): an unfused
// downsampling bottleneck's shortcut and main branch both give 4x4x32.

// CHECK-LABEL: arch.model @residual
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x8x8x16xf32>):
// CHECK-NEXT:    arch.conv %[[X]] {{.*}} -> tensor<?x4x4x32xf32>
// CHECK-NEXT:    arch.bn2d {{.*}} -> tensor<?x4x4x32xf32>
// CHECK-NEXT:    arch.conv %[[X]] {{.*}} -> tensor<?x8x8x8xf32>
// CHECK-NEXT:    arch.bn2d
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.conv {{.*}} : tensor<?x8x8x8xf32> -> tensor<?x4x4x8xf32>
// CHECK-NEXT:    arch.bn2d
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.conv {{.*}} : tensor<?x4x4x8xf32> -> tensor<?x4x4x32xf32>
// CHECK-NEXT:    arch.bn2d
// CHECK-NEXT:    arch.add {{.*}} : tensor<?x4x4x32xf32>, tensor<?x4x4x32xf32> -> tensor<?x4x4x32xf32>
// CHECK-NEXT:    arch.relu {{.*}} -> tensor<?x4x4x32xf32>
arch.model @residual input(8, 8, 16) num_classes = 10 {
^bb0(%x: tensor<?x8x8x16xf32>):
  %0 = arch.conv %x out_ch = 32 k = 1 s = 2 : tensor<?x8x8x16xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.bn2d %0 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %2 = arch.conv %x out_ch = 8 k = 1 : tensor<?x8x8x16xf32> -> tensor<?x?x?x?xf32>
  %3 = arch.bn2d %2 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %4 = arch.relu %3 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %5 = arch.conv %4 out_ch = 8 k = 3 s = 2 p = 1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %6 = arch.bn2d %5 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %7 = arch.relu %6 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %8 = arch.conv %7 out_ch = 32 k = 1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %9 = arch.bn2d %8 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %10 = arch.add %1, %9 : tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %11 = arch.relu %10 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %11 : tensor<?x?x?x?xf32>
}

// -----

// Fused kinds: blocks give ceil(H / stride); gap_fc and cbrp; every model of the module.

// CHECK-LABEL: arch.model @fused
// CHECK-NEXT:  ^{{.*}}(%{{.*}}: tensor<?x15x15x16xf32>):
// CHECK-NEXT:    arch.bottleneck_projection {{.*}} -> tensor<?x8x8x64xf32>
// CHECK-NEXT:    arch.bottleneck_identity {{.*}} -> tensor<?x8x8x64xf32>
// CHECK-NEXT:    arch.inv_residual_no_shortcut {{.*}} -> tensor<?x4x4x24xf32>
// CHECK-NEXT:    arch.gap_fc {{.*}} -> tensor<?x1x1x10xf32>
// CHECK-LABEL: arch.model @cbrp
// CHECK-NEXT:  ^{{.*}}(%{{.*}}: tensor<?x224x224x4xf32>):
// CHECK-NEXT:    arch.cbrp {{.*}} : tensor<?x224x224x4xf32> -> tensor<?x56x56x64xf32>
builtin.module {
  arch.model @fused input(15, 15, 16) num_classes = 10 fuse {
  ^bb0(%x: tensor<?x15x15x16xf32>):
    %0 = arch.bottleneck_projection %x bottleneck_ch = 16 out_ch = 64 stride = 2 : tensor<?x15x15x16xf32> -> tensor<?x?x?x?xf32>
    %1 = arch.bottleneck_identity %0 bottleneck_ch = 16 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    %2 = arch.inv_residual_no_shortcut %1 expand_ch = 384 out_ch = 24 stride = 2 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    %3 = arch.gap_fc %2 out_features = 10 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    arch.output %3 : tensor<?x?x?x?xf32>
  }
  arch.model @cbrp input(224, 224, 4) num_classes = 10 fuse {
  ^bb0(%x: tensor<?x224x224x4xf32>):
    %0 = arch.cbrp %x out_ch = 64 conv(7, 2, 3) pool(3, 2, 1) : tensor<?x224x224x4xf32> -> tensor<?x?x?x?xf32>
    arch.output %0 : tensor<?x?x?x?xf32>
  }
}

// -----

// A residual join of two shapes (a missing projection) is a diagnostic naming both.

// CHECK: 'arch.add' op expected shortcut and main of one shape, got tensor<?x8x8x16xf32> (shortcut) and tensor<?x8x8x32xf32> (main); the shortcut branch needs a projection (conv 1x1 with the block's stride and channels)
arch.model @add_mismatch input(8, 8, 16) num_classes = 10 {
^bb0(%x: tensor<?x8x8x16xf32>):
  %0 = arch.conv %x out_ch = 32 k = 3 p = 1 : tensor<?x8x8x16xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.add %x, %0 : tensor<?x8x8x16xf32>, tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %1 : tensor<?x?x?x?xf32>
}

// -----

// Bad geometry is a diagnostic at the op (the seed clamps to 1).

// CHECK: 'arch.conv' op expected kernel size 5 <= padded input size 2 + 2*0; use a smaller kernel or more padding
arch.model @kernel_too_large input(4, 4, 3) num_classes = 10 {
^bb0(%x: tensor<?x4x4x3xf32>):
  %0 = arch.maxpool %x k = 2 s = 2 : tensor<?x4x4x3xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.conv %0 out_ch = 8 k = 5 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %1 : tensor<?x?x?x?xf32>
}

// -----

// CHECK: 'arch.softmax_ce' op expected input C = num_classes = 10, got C = 12; the last layer must produce 10 logits
arch.model @classes input(4, 4, 3) num_classes = 10 {
^bb0(%x: tensor<?x4x4x3xf32>):
  %0 = arch.gap_fc %x out_features = 12 : tensor<?x4x4x3xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.softmax_ce %0 num_classes = 10 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %1 : tensor<?x?x?x?xf32>
}

// -----

// CHECK: 'builtin.unrealized_conversion_cast' op has no NHWC shape rule; an arch.model body holds arch layer ops only
arch.model @foreign input(4, 4, 3) num_classes = 10 {
^bb0(%x: tensor<?x4x4x3xf32>):
  %0 = builtin.unrealized_conversion_cast %x : tensor<?x4x4x3xf32> to tensor<?x?x?x?xf32>
  arch.output %0 : tensor<?x?x?x?xf32>
}

// -----

// CHECK: 'arch.repeat' op is tree form, but arch-deduce-shapes needs the flat graph; run arch-expand first
arch.model @tree input(4, 4, 3) num_classes = 10 {
^bb0(%x: tensor<?x4x4x3xf32>):
  %0 = arch.relu %x : tensor<?x4x4x3xf32> -> tensor<?x?x?x?xf32>
  %r = arch.repeat %0 times = 2 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32> {
  ^bb0(%i: tensor<?x?x?x?xf32>):
    arch.yield %i : tensor<?x?x?x?xf32>
  }
  arch.output %r : tensor<?x?x?x?xf32>
}
