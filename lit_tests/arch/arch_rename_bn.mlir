// RUN: tr-opt %s --split-input-file --verify-diagnostics -p arch-rename-bn | filecheck %s

// After fc: bn1d (eps/momentum kept). The walk back skips relu, so the second bn sees the
// first one (a BN, not a feature producer): bn2d, as the seed's `fc,bn,relu,bn`.

// CHECK-LABEL: arch.model @after_fc
// CHECK:         %[[F:.*]] = arch.fc
// CHECK-NEXT:    %[[B1:.*]] = arch.bn1d %[[F]] eps = 1.000000e-03 momentum = 2.000000e-01 :
// CHECK-NEXT:    %[[R:.*]] = arch.relu %[[B1]]
// CHECK-NEXT:    arch.bn2d %[[R]] :
// CHECK-NOT:     arch.bn {{.*}}:
arch.model @after_fc input(4, 4, 8) num_classes = 10 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.fc %x out_features = 16 : tensor<?x4x4x8xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.bn %0 eps = 1.0e-03 momentum = 0.2 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %2 = arch.relu %1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %3 = arch.bn %2 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %3 : tensor<?x?x?x?xf32>
}

// -----

// gap, flatten and gap_fc are feature producers; relu, tanh, identity and channel_padding
// are skipped on the way back. `gap,bn,bn` gives bn1d then bn2d.

// CHECK-LABEL: arch.model @feature_producers
// CHECK:         arch.gap
// CHECK-NEXT:    arch.bn1d
// CHECK-NEXT:    arch.bn2d
// CHECK-NEXT:    arch.flatten
// CHECK-NEXT:    arch.bn1d
// CHECK-NEXT:    arch.gap_fc
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.tanh
// CHECK-NEXT:    arch.identity
// CHECK-NEXT:    arch.channel_padding
// CHECK-NEXT:    arch.bn1d
// CHECK-NEXT:    arch.output
arch.model @feature_producers input(4, 4, 8) num_classes = 10 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.gap %x : tensor<?x4x4x8xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.bn %0 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %2 = arch.bn %1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %3 = arch.flatten %2 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %4 = arch.bn %3 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %5 = arch.gap_fc %4 out_features = 12 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %6 = arch.relu %5 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %7 = arch.tanh %6 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %8 = arch.identity %7 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %9 = arch.channel_padding %8 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %10 = arch.bn %9 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %10 : tensor<?x?x?x?xf32>
}

// -----

// Dropout and other activations stop the walk: bn2d (`fc,dropout,bn`, `fc,sigmoid,bn`).
// So do the model input, a conv and an add (the seed's Add2End).

// CHECK-LABEL: arch.model @stops
// CHECK:         arch.bn2d %{{.*}} : tensor<?x4x4x8xf32>
// CHECK-NEXT:    arch.fc
// CHECK-NEXT:    arch.dropout
// CHECK-NEXT:    arch.bn2d
// CHECK-NEXT:    arch.sigmoid
// CHECK-NEXT:    arch.bn2d
// CHECK-NEXT:    arch.conv
// CHECK-NEXT:    arch.bn2d
// CHECK-NEXT:    arch.add
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.bn2d
// CHECK-NEXT:    arch.output
arch.model @stops input(4, 4, 8) num_classes = 10 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.bn %x : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.fc %0 out_features = 8 : tensor<?x4x4x8xf32> -> tensor<?x?x?x?xf32>
  %2 = arch.dropout %1 p = 0.5 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %3 = arch.bn %2 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %4 = arch.sigmoid %3 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %5 = arch.bn %4 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %6 = arch.conv %5 out_ch = 8 k = 1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %7 = arch.bn %6 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %8 = arch.add %5, %7 : tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %9 = arch.relu %8 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %10 = arch.bn %9 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %10 : tensor<?x?x?x?xf32>
}

// -----

// bn1d / bn2d written by hand are never re-examined; every model of the module is handled.

// CHECK-LABEL: arch.model @kept
// CHECK:         arch.bn1d %{{.*}} : tensor<?x4x4x8xf32>
// CHECK-NEXT:    arch.fc
// CHECK-NEXT:    arch.bn2d
// CHECK-LABEL: arch.model @other
// CHECK:         arch.gap
// CHECK-NEXT:    arch.bn1d
builtin.module {
  arch.model @kept input(4, 4, 8) num_classes = 10 {
  ^bb0(%x: tensor<?x4x4x8xf32>):
    %0 = arch.bn1d %x : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
    %1 = arch.fc %0 out_features = 8 : tensor<?x4x4x8xf32> -> tensor<?x?x?x?xf32>
    %2 = arch.bn2d %1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    arch.output %2 : tensor<?x?x?x?xf32>
  }
  arch.model @other input(4, 4, 8) num_classes = 10 {
  ^bb0(%x: tensor<?x4x4x8xf32>):
    %0 = arch.gap %x : tensor<?x4x4x8xf32> -> tensor<?x?x?x?xf32>
    %1 = arch.bn %0 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    arch.output %1 : tensor<?x?x?x?xf32>
  }
}

// -----

// The tree form must be expanded first.

// CHECK: 'arch.seq' op is tree form, but arch-rename-bn needs the flat graph; run arch-expand first
arch.model @tree input(4, 4, 8) num_classes = 10 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %s = arch.seq %x : tensor<?x4x4x8xf32> -> tensor<?x?x?x?xf32> {
  ^bb0(%i: tensor<?x4x4x8xf32>):
    %0 = arch.bn %i : tensor<?x4x4x8xf32> -> tensor<?x?x?x?xf32>
    arch.yield %0 : tensor<?x?x?x?xf32>
  }
  arch.output %s : tensor<?x?x?x?xf32>
}
