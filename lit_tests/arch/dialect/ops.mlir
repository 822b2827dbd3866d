// Round trip of every arch op: custom form -> generic form -> custom form, checked on the
// custom form (defaults elided, unit flags as keywords), plus the generic form's defaults.
// RUN: TR_ROUNDTRIP
// RUN: tr-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// Primitives, static shapes (NHWC, dynamic batch).
// CHECK-LABEL: arch.model @primitives input(8, 8, 3) num_classes = 10 {
// CHECK-NEXT:  ^bb0(%[[X:.*]]: tensor<?x8x8x3xf32>):
// CHECK-NEXT:    %[[C:.*]] = arch.conv %[[X]] out_ch = 16 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x16xf32>
// CHECK-NEXT:    %[[C2:.*]] = arch.conv %[[C]] out_ch = 16 k = 3 s = 2 p = 1 groups = 16 : tensor<?x8x8x16xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    %[[BN:.*]] = arch.bn %[[C2]] : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    %[[BN2:.*]] = arch.bn2d %[[BN]] eps = 1.000000e-03 momentum = 2.000000e-01 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    %[[R:.*]] = arch.relu %[[BN2]] : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    %[[T:.*]] = arch.tanh %[[R]] : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    %[[S:.*]] = arch.silu %[[T]] : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    %[[R6:.*]] = arch.relu6 %[[S]] : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    %[[LR:.*]] = arch.leaky_relu %[[R6]] : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    %[[HS:.*]] = arch.hardswish %[[LR]] : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    %[[E:.*]] = arch.elu %[[HS]] : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    %[[SG:.*]] = arch.sigmoid %[[E]] : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    %[[MP:.*]] = arch.maxpool %[[SG]] k = 3 s = 1 p = 1 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    %[[AP:.*]] = arch.avgpool %[[MP]] k = 2 s = 2 : tensor<?x4x4x16xf32> -> tensor<?x2x2x16xf32>
// CHECK-NEXT:    %[[CP:.*]] = arch.channel_padding %[[AP]] : tensor<?x2x2x16xf32> -> tensor<?x2x2x16xf32>
// CHECK-NEXT:    %[[ID:.*]] = arch.identity %[[CP]] : tensor<?x2x2x16xf32> -> tensor<?x2x2x16xf32>
// CHECK-NEXT:    %[[ADD:.*]] = arch.add %[[CP]], %[[ID]] : tensor<?x2x2x16xf32>, tensor<?x2x2x16xf32> -> tensor<?x2x2x16xf32>
// CHECK-NEXT:    %[[BN1:.*]] = arch.bn1d %[[ADD]] : tensor<?x2x2x16xf32> -> tensor<?x2x2x16xf32>
// CHECK-NEXT:    %[[D:.*]] = arch.dropout %[[BN1]] p = 5.000000e-01 : tensor<?x2x2x16xf32> -> tensor<?x2x2x16xf32>
// CHECK-NEXT:    %[[F:.*]] = arch.flatten %[[D]] : tensor<?x2x2x16xf32> -> tensor<?x1x1x64xf32>
// CHECK-NEXT:    %[[FC:.*]] = arch.fc %[[F]] out_features = 32 bias : tensor<?x1x1x64xf32> -> tensor<?x1x1x32xf32>
// CHECK-NEXT:    %[[FC2:.*]] = arch.fc %[[FC]] out_features = 10 : tensor<?x1x1x32xf32> -> tensor<?x1x1x10xf32>
// CHECK-NEXT:    %[[G:.*]] = arch.gap %[[FC2]] : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
// CHECK-NEXT:    %[[CE:.*]] = arch.softmax_ce %[[G]] num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
// CHECK-NEXT:    arch.output %[[CE]] : tensor<?x1x1x10xf32>
// CHECK-NEXT:  }

// GENERIC-LABEL: "arch.model"() <{sym_name = "primitives", input_h = 8 : i64, input_w = 8 : i64, input_c = 3 : i64, num_classes = 10 : i64}>
// GENERIC:       "arch.conv"(%{{.*}}) <{out_ch = 16 : i64, k = 3 : i64, s = 1 : i64, p = 1 : i64, groups = 1 : i64}>
// GENERIC:       "arch.bn"(%{{.*}}) <{eps = 1.000000e-05 : f64, momentum = 1.000000e-01 : f64}>
// GENERIC:       "arch.avgpool"(%{{.*}}) <{k = 2 : i64, s = 2 : i64, p = 0 : i64}>
// GENERIC:       "arch.flatten"(%{{.*}}) <{start_dim = 1 : i64}>
// GENERIC:       "arch.fc"(%{{.*}}) <{out_features = 32 : i64, bias}>
// GENERIC:       "arch.fc"(%{{.*}}) <{out_features = 10 : i64}>
arch.model @primitives input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %c = arch.conv %x out_ch = 16 k = 3 s = 1 p = 1 groups = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x16xf32>
  %c2 = arch.conv %c out_ch = 16 k = 3 s = 2 p = 1 groups = 16 : tensor<?x8x8x16xf32> -> tensor<?x4x4x16xf32>
  %bn = arch.bn %c2 eps = 1.0e-05 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %bn2 = arch.bn2d %bn eps = 1.0e-03 momentum = 0.2 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %r = arch.relu %bn2 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %t = arch.tanh %r : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %s = arch.silu %t : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %r6 = arch.relu6 %s : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %lr = arch.leaky_relu %r6 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %hs = arch.hardswish %lr : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %e = arch.elu %hs : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %sg = arch.sigmoid %e : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %mp = arch.maxpool %sg k = 3 s = 1 p = 1 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %ap = arch.avgpool %mp k = 2 s = 2 p = 0 : tensor<?x4x4x16xf32> -> tensor<?x2x2x16xf32>
  %cp = arch.channel_padding %ap : tensor<?x2x2x16xf32> -> tensor<?x2x2x16xf32>
  %id = arch.identity %cp : tensor<?x2x2x16xf32> -> tensor<?x2x2x16xf32>
  %add = arch.add %cp, %id : tensor<?x2x2x16xf32>, tensor<?x2x2x16xf32> -> tensor<?x2x2x16xf32>
  %bn1 = arch.bn1d %add : tensor<?x2x2x16xf32> -> tensor<?x2x2x16xf32>
  %d = arch.dropout %bn1 p = 0.5 : tensor<?x2x2x16xf32> -> tensor<?x2x2x16xf32>
  %f = arch.flatten %d start_dim = 1 : tensor<?x2x2x16xf32> -> tensor<?x1x1x64xf32>
  %fc = arch.fc %f out_features = 32 bias : tensor<?x1x1x64xf32> -> tensor<?x1x1x32xf32>
  %fc2 = arch.fc %fc out_features = 10 : tensor<?x1x1x32xf32> -> tensor<?x1x1x10xf32>
  %g = arch.gap %fc2 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  %ce = arch.softmax_ce %g num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %ce : tensor<?x1x1x10xf32>
}

// -----

// Fused kinds, the model flags and first_layer.
// CHECK-LABEL: arch.model @fused input(32, 32, 8) num_classes = 10 amp fuse first_layer = 0 {
// CHECK-NEXT:  ^bb0(%[[X:.*]]: tensor<?x32x32x8xf32>):
// CHECK-NEXT:    %[[A:.*]] = arch.cbr %[[X]] out_ch = 16 k = 3 p = 1 : tensor<?x32x32x8xf32> -> tensor<?x32x32x16xf32>
// CHECK-NEXT:    %[[B:.*]] = arch.cbrp %[[A]] out_ch = 64 conv(7, 2, 3) pool(3, 2, 1) eps = 1.000000e-03 : tensor<?x32x32x16xf32> -> tensor<?x8x8x64xf32>
// CHECK-NEXT:    %[[C:.*]] = arch.bottleneck_identity %[[B]] bottleneck_ch = 16 : tensor<?x8x8x64xf32> -> tensor<?x8x8x64xf32>
// CHECK-NEXT:    %[[D:.*]] = arch.bottleneck_projection %[[C]] bottleneck_ch = 32 out_ch = 128 stride = 2 : tensor<?x8x8x64xf32> -> tensor<?x4x4x128xf32>
// CHECK-NEXT:    %[[E:.*]] = arch.basic_block_identity %[[D]] out_ch = 128 momentum = 1.000000e-02 : tensor<?x4x4x128xf32> -> tensor<?x4x4x128xf32>
// CHECK-NEXT:    %[[F:.*]] = arch.basic_block_projection %[[E]] out_ch = 64 : tensor<?x4x4x128xf32> -> tensor<?x4x4x64xf32>
// CHECK-NEXT:    %[[G:.*]] = arch.inv_residual_identity %[[F]] expand_ch = 384 out_ch = 64 : tensor<?x4x4x64xf32> -> tensor<?x4x4x64xf32>
// CHECK-NEXT:    %[[H:.*]] = arch.inv_residual_no_shortcut %[[G]] expand_ch = 384 out_ch = 96 stride = 2 : tensor<?x4x4x64xf32> -> tensor<?x2x2x96xf32>
// CHECK-NEXT:    %[[I:.*]] = arch.gap_fc %[[H]] out_features = 10 bias : tensor<?x2x2x96xf32> -> tensor<?x1x1x10xf32>
// CHECK-NEXT:    %[[J:.*]] = arch.softmax_ce %[[I]] num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
// CHECK-NEXT:    arch.output %[[J]] : tensor<?x1x1x10xf32>
// CHECK-NEXT:  }

// GENERIC-LABEL: "arch.model"() <{sym_name = "fused", {{.*}}amp, fuse, first_layer = 0 : i64}>
// GENERIC:       "arch.cbr"(%{{.*}}) <{out_ch = 16 : i64, k = 3 : i64, s = 1 : i64, p = 1 : i64, eps = 1.000000e-05 : f64, momentum = 1.000000e-01 : f64}>
// GENERIC:       "arch.cbrp"(%{{.*}}) <{out_ch = 64 : i64, conv_k = 7 : i64, conv_s = 2 : i64, conv_p = 3 : i64, pool_k = 3 : i64, pool_s = 2 : i64, pool_p = 1 : i64, eps = 1.000000e-03 : f64, momentum = 1.000000e-01 : f64}>
// GENERIC:       "arch.basic_block_projection"(%{{.*}}) <{out_ch = 64 : i64, stride = 1 : i64, eps = 1.000000e-05 : f64, momentum = 1.000000e-01 : f64}>
arch.model @fused input(32, 32, 8) num_classes = 10 amp fuse first_layer = 0 {
^bb0(%x: tensor<?x32x32x8xf32>):
  %a = arch.cbr %x out_ch = 16 k = 3 s = 1 p = 1 : tensor<?x32x32x8xf32> -> tensor<?x32x32x16xf32>
  %b = arch.cbrp %a out_ch = 64 conv(7, 2, 3) pool(3, 2, 1) eps = 1.0e-03 momentum = 0.1 : tensor<?x32x32x16xf32> -> tensor<?x8x8x64xf32>
  %c = arch.bottleneck_identity %b bottleneck_ch = 16 : tensor<?x8x8x64xf32> -> tensor<?x8x8x64xf32>
  %d = arch.bottleneck_projection %c bottleneck_ch = 32 out_ch = 128 stride = 2 : tensor<?x8x8x64xf32> -> tensor<?x4x4x128xf32>
  %e = arch.basic_block_identity %d out_ch = 128 momentum = 0.01 : tensor<?x4x4x128xf32> -> tensor<?x4x4x128xf32>
  %f = arch.basic_block_projection %e out_ch = 64 stride = 1 : tensor<?x4x4x128xf32> -> tensor<?x4x4x64xf32>
  %g = arch.inv_residual_identity %f expand_ch = 384 out_ch = 64 : tensor<?x4x4x64xf32> -> tensor<?x4x4x64xf32>
  %h = arch.inv_residual_no_shortcut %g expand_ch = 384 out_ch = 96 stride = 2 : tensor<?x4x4x64xf32> -> tensor<?x2x2x96xf32>
  %i = arch.gap_fc %h out_features = 10 bias : tensor<?x2x2x96xf32> -> tensor<?x1x1x10xf32>
  %j = arch.softmax_ce %i num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %j : tensor<?x1x1x10xf32>
}

// -----

// Tree form: seq, repeat, add2 (empty shortcut), block with and without mid_ch, macros.
// CHECK-LABEL: arch.model @tree input(16, 16, 3) num_classes = 4 {
// CHECK-NEXT:  ^bb0(%[[X:.*]]: tensor<?x16x16x3xf32>):
// CHECK-NEXT:    %[[S:.*]] = arch.seq %[[X]] : tensor<?x16x16x3xf32> -> tensor<?x?x?x?xf32> {
// CHECK-NEXT:    ^bb0(%[[A:.*]]: tensor<?x16x16x3xf32>):
// CHECK-NEXT:      %[[C:.*]] = arch.cbr %[[A]] out_ch = 8 k = 3 p = 1 : tensor<?x16x16x3xf32> -> tensor<?x?x?x?xf32>
// CHECK-NEXT:      %[[R:.*]] = arch.repeat %[[C]] times = 2 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32> {
// CHECK-NEXT:      ^bb0(%[[B:.*]]: tensor<?x?x?x?xf32>):
// CHECK-NEXT:        %[[AD:.*]] = arch.add2 %[[B]] : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32> shortcut {
// CHECK-NEXT:        ^bb0(%[[SC:.*]]: tensor<?x?x?x?xf32>):
// CHECK-NEXT:          arch.yield %[[SC]] : tensor<?x?x?x?xf32>
// CHECK-NEXT:        } main {
// CHECK-NEXT:        ^bb0(%[[M:.*]]: tensor<?x?x?x?xf32>):
// CHECK-NEXT:          %[[M1:.*]] = arch.conv %[[M]] out_ch = 8 k = 3 p = 1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
// CHECK-NEXT:          arch.yield %[[M1]] : tensor<?x?x?x?xf32>
// CHECK-NEXT:        }
// CHECK-NEXT:        arch.yield %[[AD]] : tensor<?x?x?x?xf32>
// CHECK-NEXT:      }
// CHECK-NEXT:      %[[BL:.*]] = arch.block %[[R]] resnet_1_3_1_ds mid_ch = 4 out_ch = 16 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
// CHECK-NEXT:      %[[BL2:.*]] = arch.block %[[BL]] mb_e6_k3 out_ch = 16 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
// CHECK-NEXT:      %[[BL3:.*]] = arch.block %[[BL2]] resnet_3_3 out_ch = 16 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
// CHECK-NEXT:      %[[P:.*]] = arch.cbrp %[[BL3]] out_ch = 16 conv(3, 1, 1) pool(2, 2, 0) : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
// CHECK-NEXT:      %[[GF:.*]] = arch.gap_fc %[[P]] out_features = 4 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
// CHECK-NEXT:      arch.yield %[[GF]] : tensor<?x?x?x?xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    arch.output %[[S]] : tensor<?x?x?x?xf32>
// CHECK-NEXT:  }

// GENERIC-LABEL: "arch.model"() <{sym_name = "tree"
// GENERIC:       "arch.repeat"(%{{.*}}) <{times = 2 : i64}> ({
// GENERIC:       "arch.add2"(%{{.*}}) ({
// GENERIC:       "arch.conv"(%{{.*}}) <{out_ch = 8 : i64, k = 3 : i64, p = 1 : i64, s = 1 : i64, groups = 1 : i64}>
// GENERIC:       "arch.block"(%{{.*}}) <{style = #arch<block_style resnet_1_3_1_ds>, mid_ch = 4 : i64, out_ch = 16 : i64}>
// GENERIC:       "arch.block"(%{{.*}}) <{style = #arch<block_style mb_e6_k3>, out_ch = 16 : i64}>
arch.model @tree input(16, 16, 3) num_classes = 4 {
^bb0(%x: tensor<?x16x16x3xf32>):
  %s = arch.seq %x : tensor<?x16x16x3xf32> -> tensor<?x?x?x?xf32> {
  ^bb0(%a: tensor<?x16x16x3xf32>):
    %c = arch.cbr %a out_ch = 8 k = 3 p = 1 : tensor<?x16x16x3xf32> -> tensor<?x?x?x?xf32>
    %r = arch.repeat %c times = 2 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32> {
    ^bb0(%b: tensor<?x?x?x?xf32>):
      %ad = arch.add2 %b : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32> shortcut {
      ^bb0(%sc: tensor<?x?x?x?xf32>):
        arch.yield %sc : tensor<?x?x?x?xf32>
      } main {
      ^bb0(%m: tensor<?x?x?x?xf32>):
        %m1 = arch.conv %m out_ch = 8 k = 3 p = 1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
        arch.yield %m1 : tensor<?x?x?x?xf32>
      }
      arch.yield %ad : tensor<?x?x?x?xf32>
    }
    %bl = arch.block %r resnet_1_3_1_ds mid_ch = 4 out_ch = 16 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    %bl2 = arch.block %bl mb_e6_k3 out_ch = 16 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    %bl3 = arch.block %bl2 resnet_3_3 out_ch = 16 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    %p = arch.cbrp %bl3 out_ch = 16 conv(3, 1, 1) pool(2, 2, 0) : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    %gf = arch.gap_fc %p out_features = 4 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    arch.yield %gf : tensor<?x?x?x?xf32>
  }
  arch.output %s : tensor<?x?x?x?xf32>
}

// -----

// The block style attribute on its own, every style, and discardable attributes on ops.
// CHECK-LABEL: arch.model @attrs input(4, 4, 1) num_classes = 2 attributes {note = "kept"} {
// CHECK:         %{{.*}} = arch.relu %{{.*}} {tag = 1 : i64} : tensor<?x4x4x1xf32> -> tensor<?x4x4x1xf32>
// CHECK:       "test.op"() {styles = [#arch<block_style resnet_1_3_1>, #arch<block_style resnet_1_3_1_ds>, #arch<block_style resnet_3_3>, #arch<block_style resnet_3_3_ds>, #arch<block_style mb_e1_k3>, #arch<block_style mb_e1_k3_ds>, #arch<block_style mb_e6_k3>, #arch<block_style mb_e6_k3_ds>]} : () -> ()
arch.model @attrs input(4, 4, 1) num_classes = 2 attributes {note = "kept"} {
^bb0(%x: tensor<?x4x4x1xf32>):
  %r = arch.relu %x {tag = 1 : i64} : tensor<?x4x4x1xf32> -> tensor<?x4x4x1xf32>
  arch.output %r : tensor<?x4x4x1xf32>
}
"test.op"() {styles = [#arch<block_style resnet_1_3_1>, #arch<block_style resnet_1_3_1_ds>, #arch<block_style resnet_3_3>, #arch<block_style resnet_3_3_ds>, #arch<block_style mb_e1_k3>, #arch<block_style mb_e1_k3_ds>, #arch<block_style mb_e6_k3>, #arch<block_style mb_e6_k3_ds>]} : () -> ()
