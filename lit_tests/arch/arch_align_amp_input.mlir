// RUN: tr-opt %s --split-input-file --verify-diagnostics -p arch-align-amp-input | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'arch-align-amp-input{amp=true}' | filecheck %s --check-prefix=AMP

// AMP and a dense conv first: C = 3 is rounded up to 4, in input_c and in the argument type
// (H and W stay). The conv's result type is still valid.

// CHECK-LABEL: arch.model @conv_first input(8, 8, 4) num_classes = 10 amp {
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x8x8x4xf32>):
// CHECK-NEXT:    arch.conv %[[X]] out_ch = 8 k = 3 p = 1 : tensor<?x8x8x4xf32> -> tensor<?x8x8x8xf32>
// AMP-LABEL: arch.model @conv_first input(8, 8, 4) num_classes = 10 amp {
arch.model @conv_first input(8, 8, 3) num_classes = 10 amp {
^bb0(%x: tensor<?x8x8x3xf32>):
  %0 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x8xf32>
  arch.output %0 : tensor<?x8x8x8xf32>
}

// -----

// A cbr first, C = 5 -> 8; the argument's unknown H, W stay unknown.

// CHECK-LABEL: arch.model @cbr_first input(8, 8, 8) num_classes = 10 amp {
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x?x?x8xf32>):
// CHECK-NEXT:    arch.cbr %[[X]]
arch.model @cbr_first input(8, 8, 5) num_classes = 10 amp {
^bb0(%x: tensor<?x?x?x?xf32>):
  %0 = arch.cbr %x out_ch = 8 k = 3 p = 1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %0 : tensor<?x?x?x?xf32>
}

// -----

// Without amp nothing changes; the option amp=true sets the flag, then aligns. Two convs
// reading the input are both fine.

// CHECK-LABEL: arch.model @no_amp input(8, 8, 1) num_classes = 10 {
// CHECK-NEXT:  ^{{.*}}(%{{.*}}: tensor<?x8x8x1xf32>):
// AMP-LABEL: arch.model @no_amp input(8, 8, 4) num_classes = 10 amp {
// AMP-NEXT:  ^{{.*}}(%{{.*}}: tensor<?x8x8x4xf32>):
arch.model @no_amp input(8, 8, 1) num_classes = 10 {
^bb0(%x: tensor<?x8x8x1xf32>):
  %0 = arch.conv %x out_ch = 8 k = 1 : tensor<?x8x8x1xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.conv %x out_ch = 8 k = 1 : tensor<?x8x8x1xf32> -> tensor<?x?x?x?xf32>
  %2 = arch.add %0, %1 : tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %2 : tensor<?x?x?x?xf32>
}

// -----

// Already a multiple of 4; a first fc (the MLP of facts 7(b)); a grouped conv; an input
// also read by an identity (an empty shortcut at the start): no alignment.

// CHECK-LABEL: arch.model @aligned input(8, 8, 4) num_classes = 10 amp {
// CHECK-LABEL: arch.model @fc_first input(28, 28, 1) num_classes = 10 amp {
// CHECK-NEXT:  ^{{.*}}(%{{.*}}: tensor<?x28x28x1xf32>):
// CHECK-LABEL: arch.model @grouped input(8, 8, 3) num_classes = 10 amp {
// CHECK-LABEL: arch.model @shortcut_first input(8, 8, 3) num_classes = 10 amp {
// AMP-LABEL: arch.model @aligned input(8, 8, 4) num_classes = 10 amp {
// AMP-LABEL: arch.model @fc_first input(28, 28, 1) num_classes = 10 amp {
// AMP-LABEL: arch.model @grouped input(8, 8, 3) num_classes = 10 amp {
// AMP-LABEL: arch.model @shortcut_first input(8, 8, 3) num_classes = 10 amp {
builtin.module {
  arch.model @aligned input(8, 8, 4) num_classes = 10 amp {
  ^bb0(%x: tensor<?x8x8x4xf32>):
    %0 = arch.conv %x out_ch = 8 k = 1 : tensor<?x8x8x4xf32> -> tensor<?x?x?x?xf32>
    arch.output %0 : tensor<?x?x?x?xf32>
  }
  arch.model @fc_first input(28, 28, 1) num_classes = 10 amp {
  ^bb0(%x: tensor<?x28x28x1xf32>):
    %0 = arch.fc %x out_features = 10 : tensor<?x28x28x1xf32> -> tensor<?x?x?x?xf32>
    arch.output %0 : tensor<?x?x?x?xf32>
  }
  arch.model @grouped input(8, 8, 3) num_classes = 10 amp {
  ^bb0(%x: tensor<?x8x8x3xf32>):
    %0 = arch.conv %x out_ch = 3 k = 3 p = 1 groups = 3 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
    arch.output %0 : tensor<?x?x?x?xf32>
  }
  arch.model @shortcut_first input(8, 8, 3) num_classes = 10 amp {
  ^bb0(%x: tensor<?x8x8x3xf32>):
    %i = arch.identity %x : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
    %0 = arch.conv %x out_ch = 3 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
    %1 = arch.add %i, %0 : tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    arch.output %1 : tensor<?x?x?x?xf32>
  }
}

// -----

// The tree form must be expanded first.

// CHECK: 'arch.seq' op is tree form, but arch-align-amp-input needs the flat graph; run arch-expand first
// AMP: 'arch.seq' op is tree form, but arch-align-amp-input needs the flat graph; run arch-expand first
arch.model @tree input(8, 8, 3) num_classes = 10 amp {
^bb0(%x: tensor<?x8x8x3xf32>):
  %s = arch.seq %x : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32> {
  ^bb0(%i: tensor<?x8x8x3xf32>):
    arch.yield %i : tensor<?x8x8x3xf32>
  }
  arch.output %s : tensor<?x?x?x?xf32>
}
