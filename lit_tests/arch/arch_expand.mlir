// RUN: tr-opt %s --split-input-file --verify-diagnostics -p arch-expand | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'arch-expand{fuse=true}' | filecheck %s --check-prefix=FUSE

// Macros without fuse: cbr -> conv, bn (its eps/momentum), relu; cbrp -> conv, bn, relu,
// maxpool; gap_fc -> gap, fc. With fuse=true cbr stays, cbrp and gap_fc expand the same way.

// CHECK-LABEL: arch.model @macros
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x32x32x3xf32>):
// CHECK-NEXT:    %[[C:.*]] = arch.conv %[[X]] out_ch = 16 k = 3 p = 1 : tensor<?x32x32x3xf32> -> tensor<?x?x?x?xf32>
// CHECK-NEXT:    %[[B:.*]] = arch.bn %[[C]] eps = 1.000000e-03 momentum = 2.000000e-01
// CHECK-NEXT:    %[[R:.*]] = arch.relu %[[B]]
// CHECK-NEXT:    %[[C2:.*]] = arch.conv %[[R]] out_ch = 32 k = 3 s = 2 p = 1
// CHECK-NEXT:    %[[B2:.*]] = arch.bn %[[C2]] :
// CHECK-NEXT:    %[[R2:.*]] = arch.relu %[[B2]]
// CHECK-NEXT:    %[[P:.*]] = arch.maxpool %[[R2]] k = 3 s = 2 p = 1
// CHECK-NEXT:    %[[G:.*]] = arch.gap %[[P]]
// CHECK-NEXT:    %[[F:.*]] = arch.fc %[[G]] out_features = 10 bias
// CHECK-NEXT:    arch.output %[[F]]

// FUSE-LABEL: arch.model @macros input(32, 32, 3) num_classes = 10 fuse {
// FUSE-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x32x32x3xf32>):
// FUSE-NEXT:    %[[C:.*]] = arch.cbr %[[X]] out_ch = 16 k = 3 p = 1 eps = 1.000000e-03 momentum = 2.000000e-01
// FUSE-NEXT:    %[[C2:.*]] = arch.conv %[[C]] out_ch = 32 k = 3 s = 2 p = 1
// FUSE-NEXT:    arch.bn
// FUSE-NEXT:    arch.relu
// FUSE-NEXT:    arch.maxpool
// FUSE-NEXT:    arch.gap
// FUSE-NEXT:    arch.fc
// FUSE-NEXT:    arch.output
arch.model @macros input(32, 32, 3) num_classes = 10 {
^bb0(%x: tensor<?x32x32x3xf32>):
  %s = arch.seq %x : tensor<?x32x32x3xf32> -> tensor<?x?x?x?xf32> {
  ^bb0(%i: tensor<?x32x32x3xf32>):
    %0 = arch.cbr %i out_ch = 16 k = 3 p = 1 eps = 1.0e-03 momentum = 0.2 : tensor<?x32x32x3xf32> -> tensor<?x?x?x?xf32>
    %1 = arch.cbrp %0 out_ch = 32 conv(3, 2, 1) pool(3, 2, 1) : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    %2 = arch.gap_fc %1 out_features = 10 bias : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    arch.yield %2 : tensor<?x?x?x?xf32>
  }
  arch.output %s : tensor<?x?x?x?xf32>
}

// -----

// add2: both regions expand from the same input; an empty shortcut is the input itself.
// The shortcut branch comes first, then the main branch, then the join.

// CHECK-LABEL: arch.model @add2
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x8x8x16xf32>):
// CHECK-NEXT:    %[[M1:.*]] = arch.conv %[[X]] out_ch = 16 k = 3 p = 1
// CHECK-NEXT:    %[[M2:.*]] = arch.bn %[[M1]]
// CHECK-NEXT:    %[[A1:.*]] = arch.add %[[X]], %[[M2]]
// CHECK-NEXT:    %[[R:.*]] = arch.relu %[[A1]]
// CHECK-NEXT:    %[[S1:.*]] = arch.conv %[[R]] out_ch = 32 k = 1 s = 2
// CHECK-NEXT:    %[[S2:.*]] = arch.bn %[[S1]]
// CHECK-NEXT:    %[[N1:.*]] = arch.conv %[[R]] out_ch = 32 k = 3 s = 2 p = 1
// CHECK-NEXT:    %[[A2:.*]] = arch.add %[[S2]], %[[N1]]
// CHECK-NEXT:    arch.output %[[A2]]
arch.model @add2 input(8, 8, 16) num_classes = 10 {
^bb0(%x: tensor<?x8x8x16xf32>):
  %s = arch.seq %x : tensor<?x8x8x16xf32> -> tensor<?x?x?x?xf32> {
  ^bb0(%i: tensor<?x8x8x16xf32>):
    %a = arch.add2 %i : tensor<?x8x8x16xf32> -> tensor<?x?x?x?xf32> shortcut {
    ^bb0(%sc: tensor<?x8x8x16xf32>):
      arch.yield %sc : tensor<?x8x8x16xf32>
    } main {
    ^bb0(%m: tensor<?x8x8x16xf32>):
      %0 = arch.conv %m out_ch = 16 k = 3 p = 1 : tensor<?x8x8x16xf32> -> tensor<?x?x?x?xf32>
      %1 = arch.bn %0 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
      arch.yield %1 : tensor<?x?x?x?xf32>
    }
    %r = arch.relu %a : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    %b = arch.add2 %r : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32> shortcut {
    ^bb0(%sc: tensor<?x?x?x?xf32>):
      %0 = arch.conv %sc out_ch = 32 k = 1 s = 2 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
      %1 = arch.bn %0 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
      arch.yield %1 : tensor<?x?x?x?xf32>
    } main {
    ^bb0(%m: tensor<?x?x?x?xf32>):
      %0 = arch.conv %m out_ch = 32 k = 3 s = 2 p = 1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
      arch.yield %0 : tensor<?x?x?x?xf32>
    }
    arch.yield %b : tensor<?x?x?x?xf32>
  }
  arch.output %s : tensor<?x?x?x?xf32>
}

// -----

// repeat: each repetition is expanded again with the running channel count, so the first
// bottleneck (16 -> 32 channels) is a projection block and the second an identity block.

// CHECK-LABEL: arch.model @repeat_bottleneck
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x8x8x16xf32>):
// CHECK-NEXT:    %[[P:.*]] = arch.conv %[[X]] out_ch = 32 k = 1 :
// CHECK-NEXT:    %[[PB:.*]] = arch.bn %[[P]]
// CHECK-NEXT:    %[[C1:.*]] = arch.conv %[[X]] out_ch = 8 k = 1 :
// CHECK-NEXT:    arch.bn
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.conv %{{.*}} out_ch = 8 k = 3 p = 1 :
// CHECK-NEXT:    arch.bn
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.conv %{{.*}} out_ch = 32 k = 1 :
// CHECK-NEXT:    %[[M:.*]] = arch.bn
// CHECK-NEXT:    %[[A:.*]] = arch.add %[[PB]], %[[M]]
// CHECK-NEXT:    %[[Y:.*]] = arch.relu %[[A]]
// CHECK-NEXT:    arch.conv %[[Y]] out_ch = 8 k = 1 :
// CHECK-NEXT:    arch.bn
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.conv %{{.*}} out_ch = 8 k = 3 p = 1 :
// CHECK-NEXT:    arch.bn
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.conv %{{.*}} out_ch = 32 k = 1 :
// CHECK-NEXT:    %[[M2:.*]] = arch.bn
// CHECK-NEXT:    %[[A2:.*]] = arch.add %[[Y]], %[[M2]]
// CHECK-NEXT:    %[[Y2:.*]] = arch.relu %[[A2]]
// CHECK-NEXT:    arch.output %[[Y2]]

// FUSE-LABEL: arch.model @repeat_bottleneck
// FUSE-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x8x8x16xf32>):
// FUSE-NEXT:    %[[P:.*]] = arch.bottleneck_projection %[[X]] bottleneck_ch = 8 out_ch = 32 :
// FUSE-NEXT:    %[[I:.*]] = arch.bottleneck_identity %[[P]] bottleneck_ch = 8 :
// FUSE-NEXT:    arch.output %[[I]]
arch.model @repeat_bottleneck input(8, 8, 16) num_classes = 10 {
^bb0(%x: tensor<?x8x8x16xf32>):
  %r = arch.repeat %x times = 2 : tensor<?x8x8x16xf32> -> tensor<?x?x?x?xf32> {
  ^bb0(%i: tensor<?x?x?x?xf32>):
    %b = arch.block %i resnet_1_3_1 mid_ch = 8 out_ch = 32 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    arch.yield %b : tensor<?x?x?x?xf32>
  }
  arch.output %r : tensor<?x?x?x?xf32>
}

// -----

// The fused kinds of every block style (facts sheet 2.5): identity when stride 1 and the
// channels stay, projection / no-shortcut otherwise; MobileNet expand_ch = in * ratio.
// Blocks at the top level of the body (no arch.seq) expand too.

// CHECK-LABEL: arch.model @fused_blocks
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x16x16x16xf32>):
// CHECK-NEXT:    %[[B0:.*]] = arch.bottleneck_identity %[[X]] bottleneck_ch = 4 :
// CHECK-NEXT:    %[[B1:.*]] = arch.bottleneck_projection %[[B0]] bottleneck_ch = 4 out_ch = 32 :
// CHECK-NEXT:    %[[B2:.*]] = arch.bottleneck_projection %[[B1]] bottleneck_ch = 8 out_ch = 32 stride = 2 :
// CHECK-NEXT:    %[[B3:.*]] = arch.basic_block_identity %[[B2]] out_ch = 32 :
// CHECK-NEXT:    %[[B4:.*]] = arch.basic_block_projection %[[B3]] out_ch = 64 :
// CHECK-NEXT:    %[[B5:.*]] = arch.basic_block_projection %[[B4]] out_ch = 64 stride = 2 :
// CHECK-NEXT:    %[[B6:.*]] = arch.inv_residual_identity %[[B5]] expand_ch = 64 out_ch = 64 :
// CHECK-NEXT:    %[[B7:.*]] = arch.inv_residual_identity %[[B6]] expand_ch = 384 out_ch = 64 :
// CHECK-NEXT:    %[[B8:.*]] = arch.inv_residual_no_shortcut %[[B7]] expand_ch = 384 out_ch = 32 :
// CHECK-NEXT:    %[[B9:.*]] = arch.inv_residual_no_shortcut %[[B8]] expand_ch = 32 out_ch = 32 stride = 2 :
// CHECK-NEXT:    %[[B10:.*]] = arch.inv_residual_no_shortcut %[[B9]] expand_ch = 192 out_ch = 16 stride = 2 :
// CHECK-NEXT:    arch.output %[[B10]]
arch.model @fused_blocks input(16, 16, 16) num_classes = 10 fuse {
^bb0(%x: tensor<?x16x16x16xf32>):
  %0 = arch.block %x resnet_1_3_1 mid_ch = 4 out_ch = 16 : tensor<?x16x16x16xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.block %0 resnet_1_3_1 mid_ch = 4 out_ch = 32 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %2 = arch.block %1 resnet_1_3_1_ds mid_ch = 8 out_ch = 32 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %3 = arch.block %2 resnet_3_3 out_ch = 32 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %4 = arch.block %3 resnet_3_3 out_ch = 64 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %5 = arch.block %4 resnet_3_3_ds out_ch = 64 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %6 = arch.block %5 mb_e1_k3 out_ch = 64 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %7 = arch.block %6 mb_e6_k3 out_ch = 64 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %8 = arch.block %7 mb_e6_k3 out_ch = 32 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %9 = arch.block %8 mb_e1_k3_ds out_ch = 32 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %10 = arch.block %9 mb_e6_k3_ds out_ch = 16 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %10 : tensor<?x?x?x?xf32>
}

// -----

// A shortcut-free inverted residual on the model input expands to its primitives with fuse too:
// its first conv is the first layer, which a fused op cannot be (memplan-derive-shapes refuses
// it), so mbconv first trains fused as unfused. The next one fuses.

// FUSE-LABEL: arch.model @mbconv_first
// FUSE-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x8x8x2xf32>):
// FUSE-NEXT:    %[[C:.*]] = arch.conv %[[X]] out_ch = 12 k = 1 :
// FUSE-NEXT:    arch.bn
// FUSE-NEXT:    arch.relu
// FUSE-NEXT:    arch.conv {{.*}} out_ch = 12 k = 3 s = 2 p = 1 groups = 12
// FUSE-NEXT:    arch.bn
// FUSE-NEXT:    arch.relu
// FUSE-NEXT:    arch.conv {{.*}} out_ch = 8 k = 1
// FUSE-NEXT:    %[[B:.*]] = arch.bn
// FUSE-NEXT:    %[[N:.*]] = arch.inv_residual_no_shortcut %[[B]] expand_ch = 48 out_ch = 16 :
// FUSE-NEXT:    arch.output %[[N]]
// CHECK-LABEL: arch.model @mbconv_first
arch.model @mbconv_first input(8, 8, 2) num_classes = 10 fuse {
^bb0(%x: tensor<?x8x8x2xf32>):
  %0 = arch.block %x mb_e6_k3_ds out_ch = 8 : tensor<?x8x8x2xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.block %0 mb_e6_k3 out_ch = 16 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %1 : tensor<?x?x?x?xf32>
}

// -----

// Unfused basic block with downsampling: projection conv 1x1 stride 2 + bn, main conv 3x3
// stride 2, conv 3x3, join, post-add relu.

// CHECK-LABEL: arch.model @basic_ds
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x8x8x8xf32>):
// CHECK-NEXT:    %[[P:.*]] = arch.conv %[[X]] out_ch = 16 k = 1 s = 2 :
// CHECK-NEXT:    %[[PB:.*]] = arch.bn %[[P]]
// CHECK-NEXT:    %[[C1:.*]] = arch.conv %[[X]] out_ch = 16 k = 3 s = 2 p = 1 :
// CHECK-NEXT:    arch.bn %[[C1]]
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.conv %{{.*}} out_ch = 16 k = 3 p = 1 :
// CHECK-NEXT:    %[[M:.*]] = arch.bn
// CHECK-NEXT:    %[[A:.*]] = arch.add %[[PB]], %[[M]]
// CHECK-NEXT:    %[[R:.*]] = arch.relu %[[A]]
// CHECK-NEXT:    arch.output %[[R]]
arch.model @basic_ds input(8, 8, 8) num_classes = 10 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %0 = arch.block %x resnet_3_3_ds out_ch = 16 : tensor<?x8x8x8xf32> -> tensor<?x?x?x?xf32>
  arch.output %0 : tensor<?x?x?x?xf32>
}

// -----

// Unfused MobileNet blocks: 1x1 expansion (width in * ratio, also for E1), a true depthwise
// 3x3 (groups = expansion width), 1x1 projection; identity shortcut only with stride 1 and
// equal channels, no post-add activation.

// CHECK-LABEL: arch.model @mobilenet
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x8x8x8xf32>):
// CHECK-NEXT:    arch.conv %[[X]] out_ch = 48 k = 1 :
// CHECK-NEXT:    arch.bn
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.conv %{{.*}} out_ch = 48 k = 3 p = 1 groups = 48 :
// CHECK-NEXT:    arch.bn
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.conv %{{.*}} out_ch = 8 k = 1 :
// CHECK-NEXT:    %[[M:.*]] = arch.bn
// CHECK-NEXT:    %[[A:.*]] = arch.add %[[X]], %[[M]]
// CHECK-NEXT:    arch.conv %[[A]] out_ch = 8 k = 1 :
// CHECK-NEXT:    arch.bn
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.conv %{{.*}} out_ch = 8 k = 3 s = 2 p = 1 groups = 8 :
// CHECK-NEXT:    arch.bn
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.conv %{{.*}} out_ch = 16 k = 1 :
// CHECK-NEXT:    %[[Y:.*]] = arch.bn
// CHECK-NEXT:    arch.output %[[Y]]
arch.model @mobilenet input(8, 8, 8) num_classes = 10 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %0 = arch.block %x mb_e6_k3 out_ch = 8 : tensor<?x8x8x8xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.block %0 mb_e1_k3_ds out_ch = 16 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %1 : tensor<?x?x?x?xf32>
}

// -----

// Empty regions expand to nothing; the running channel count flows through flat layers
// (fc sets it to 16 here, so the block is an identity block).

// CHECK-LABEL: arch.model @empty_regions
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x4x4x3xf32>):
// CHECK-NEXT:    %[[F:.*]] = arch.fc %[[X]] out_features = 16 :
// CHECK-NEXT:    %[[B:.*]] = arch.basic_block_identity %[[F]] out_ch = 16 :
// CHECK-NEXT:    arch.output %[[B]]
arch.model @empty_regions input(4, 4, 3) num_classes = 10 fuse {
^bb0(%x: tensor<?x4x4x3xf32>):
  %0 = arch.seq %x : tensor<?x4x4x3xf32> -> tensor<?x?x?x?xf32> {
  ^bb0(%i: tensor<?x4x4x3xf32>):
    arch.yield %i : tensor<?x4x4x3xf32>
  }
  %1 = arch.repeat %0 times = 3 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32> {
  ^bb0(%i: tensor<?x?x?x?xf32>):
    arch.yield %i : tensor<?x?x?x?xf32>
  }
  %2 = arch.fc %1 out_features = 16 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %3 = arch.block %2 resnet_3_3 out_ch = 16 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %3 : tensor<?x?x?x?xf32>
}

// -----

// A flat graph passes through unchanged (the pass is idempotent); known types are kept.
// Every arch.model of the module is expanded.

// CHECK-LABEL: arch.model @flat
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x8x8x3xf32>):
// CHECK-NEXT:    %[[C:.*]] = arch.conv %[[X]] out_ch = 8 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x8xf32>
// CHECK-NEXT:    %[[B:.*]] = arch.bn2d %[[C]] : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
// CHECK-NEXT:    %[[A:.*]] = arch.add %[[C]], %[[B]]
// CHECK-NEXT:    arch.output %[[A]]
// CHECK-LABEL: arch.model @second
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x8x8x8xf32>):
// CHECK-NEXT:    arch.basic_block_identity %[[X]] out_ch = 8 :
builtin.module {
  arch.model @flat input(8, 8, 3) num_classes = 10 {
  ^bb0(%x: tensor<?x8x8x3xf32>):
    %0 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x8xf32>
    %1 = arch.bn2d %0 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
    %2 = arch.add %0, %1 : tensor<?x8x8x8xf32>, tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
    arch.output %2 : tensor<?x8x8x8xf32>
  }
  arch.model @second input(8, 8, 8) num_classes = 10 fuse {
  ^bb0(%x: tensor<?x8x8x8xf32>):
    %0 = arch.block %x resnet_3_3 out_ch = 8 : tensor<?x8x8x8xf32> -> tensor<?x?x?x?xf32>
    arch.output %0 : tensor<?x?x?x?xf32>
  }
}

// -----

// A block whose input does not come from the model input through arch layers has no
// running channel count.

// CHECK: 'arch.block' op needs the channel count of its input
// FUSE: 'arch.block' op needs the channel count of its input
arch.model @no_channels input(8, 8, 8) num_classes = 10 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %c = builtin.unrealized_conversion_cast %x : tensor<?x8x8x8xf32> to tensor<?x8x8x8xf32>
  %0 = arch.block %c resnet_3_3 out_ch = 8 : tensor<?x8x8x8xf32> -> tensor<?x?x?x?xf32>
  arch.output %0 : tensor<?x?x?x?xf32>
}

// -----

// A repeat count that would unroll past MAX_LAYERS (100000) is a diagnostic at the repeat, found
// after one repetition instead of hours of unrolling.

// CHECK: 'arch.repeat' op would expand to 100000000 layers (1 per repetition x times = 100000000), more than the 100000 a model may have; check the repeat count
// FUSE: 'arch.repeat' op would expand to 100000000 layers
arch.model @huge_repeat input(8, 8, 3) num_classes = 3 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %0 = arch.repeat %x times = 100000000 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32> {
  ^bb0(%i: tensor<?x?x?x?xf32>):
    %r = arch.relu %i : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    arch.yield %r : tensor<?x?x?x?xf32>
  }
  arch.output %0 : tensor<?x?x?x?xf32>
}

// -----

// Nested repeats: the outer one is diagnosed once its first repetition shows the total
// (400 x 400 layers).

// CHECK: 'arch.repeat' op would expand to 160000 layers (400 per repetition x times = 400)
// FUSE: 'arch.repeat' op would expand to 160000 layers (400 per repetition x times = 400)
arch.model @nested_repeat input(8, 8, 3) num_classes = 3 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %0 = arch.repeat %x times = 400 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32> {
  ^bb0(%i: tensor<?x?x?x?xf32>):
    %1 = arch.repeat %i times = 400 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32> {
    ^bb0(%j: tensor<?x?x?x?xf32>):
      %r = arch.relu %j : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
      arch.yield %r : tensor<?x?x?x?xf32>
    }
    arch.yield %1 : tensor<?x?x?x?xf32>
  }
  arch.output %0 : tensor<?x?x?x?xf32>
}

// -----

// Repeating an empty body is the identity, whatever the count (no unrolling loop).

// CHECK-LABEL: arch.model @empty_repeat
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x8x8x3xf32>):
// CHECK-NEXT:    arch.output %[[X]]
// FUSE-LABEL: arch.model @empty_repeat
arch.model @empty_repeat input(8, 8, 3) num_classes = 3 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %0 = arch.repeat %x times = 1000000000000 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32> {
  ^bb0(%i: tensor<?x?x?x?xf32>):
    arch.yield %i : tensor<?x?x?x?xf32>
  }
  arch.output %0 : tensor<?x?x?x?xf32>
}
