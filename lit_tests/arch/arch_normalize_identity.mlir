// RUN: tr-opt %s --split-input-file --verify-diagnostics -p arch-normalize-identity | filecheck %s

// An empty shortcut (the add reads the block input that the main branch starts from) gets
// an explicit identity, right before the main branch's first op.

// CHECK-LABEL: arch.model @empty_shortcut
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x8x8x8xf32>):
// CHECK-NEXT:    %[[I:.*]] = arch.identity %[[X]] : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
// CHECK-NEXT:    %[[C:.*]] = arch.conv %[[X]]
// CHECK-NEXT:    %[[B:.*]] = arch.bn2d %[[C]]
// CHECK-NEXT:    %[[A:.*]] = arch.add %[[I]], %[[B]]
// CHECK-NEXT:    arch.relu %[[A]]
arch.model @empty_shortcut input(8, 8, 8) num_classes = 10 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.bn2d %0 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %2 = arch.add %x, %1 : tensor<?x8x8x8xf32>, tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %3 = arch.relu %2 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %3 : tensor<?x?x?x?xf32>
}

// -----

// User identities are removed everywhere (a standalone one, and one written as the
// shortcut of an add2, which then gets a fresh identity before the main branch).

// CHECK-LABEL: arch.model @user_identities
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x8x8x8xf32>):
// CHECK-NEXT:    %[[R:.*]] = arch.relu %[[X]]
// CHECK-NEXT:    %[[I:.*]] = arch.identity %[[R]]
// CHECK-NEXT:    %[[C:.*]] = arch.conv %[[R]]
// CHECK-NEXT:    %[[A:.*]] = arch.add %[[I]], %[[C]]
// CHECK-NEXT:    arch.output %[[A]]
arch.model @user_identities input(8, 8, 8) num_classes = 10 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %0 = arch.identity %x : tensor<?x8x8x8xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.relu %0 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %2 = arch.identity %1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %3 = arch.conv %1 out_ch = 8 k = 3 p = 1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %4 = arch.add %2, %3 : tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %4 : tensor<?x?x?x?xf32>
}

// -----

// A projection shortcut is a real branch: no identity. Neither for two branches from
// unrelated values.

// CHECK-LABEL: arch.model @projection
// CHECK-NOT:     arch.identity
// CHECK:         arch.output
arch.model @projection input(8, 8, 8) num_classes = 10 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %0 = arch.conv %x out_ch = 16 k = 1 s = 2 : tensor<?x8x8x8xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.bn2d %0 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %2 = arch.conv %x out_ch = 16 k = 3 s = 2 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x?x?x?xf32>
  %3 = arch.add %1, %2 : tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %4 = arch.relu %3 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %5 = arch.tanh %3 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %6 = arch.add %4, %5 : tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %6 : tensor<?x?x?x?xf32>
}

// -----

// Nested residuals with empty shortcuts on the same input: both get an identity, in the
// seed's order (outer Add2Start, Identity, ... inner Add2Start, Identity, stem).

// CHECK-LABEL: arch.model @nested
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x8x8x8xf32>):
// CHECK-NEXT:    %[[IO:.*]] = arch.identity %[[X]]
// CHECK-NEXT:    %[[II:.*]] = arch.identity %[[X]]
// CHECK-NEXT:    %[[C:.*]] = arch.conv %[[X]]
// CHECK-NEXT:    %[[AI:.*]] = arch.add %[[II]], %[[C]]
// CHECK-NEXT:    %[[R:.*]] = arch.relu %[[AI]]
// CHECK-NEXT:    %[[AO:.*]] = arch.add %[[IO]], %[[R]]
// CHECK-NEXT:    arch.output %[[AO]]
arch.model @nested input(8, 8, 8) num_classes = 10 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.add %x, %0 : tensor<?x8x8x8xf32>, tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %2 = arch.relu %1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %3 = arch.add %x, %2 : tensor<?x8x8x8xf32>, tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %3 : tensor<?x?x?x?xf32>
}

// -----

// Idempotent: a normalized graph is left as it is.

// CHECK-LABEL: arch.model @normalized
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x8x8x8xf32>):
// CHECK-NEXT:    %[[I:.*]] = arch.identity %[[X]]
// CHECK-NEXT:    %[[C:.*]] = arch.conv %[[X]]
// CHECK-NEXT:    %[[A:.*]] = arch.add %[[I]], %[[C]]
// CHECK-NEXT:    arch.output %[[A]]
arch.model @normalized input(8, 8, 8) num_classes = 10 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %i = arch.identity %x : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %0 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.add %i, %0 : tensor<?x8x8x8xf32>, tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %1 : tensor<?x?x?x?xf32>
}

// -----

// add2(identity(), identity()): both branches empty once identities are gone.

// CHECK: 'arch.add' op expected a non-empty main branch, got the input of the block as main operand (the seed's "Empty stem in add2"); give the main branch of add2 at least one layer
arch.model @both_empty input(8, 8, 8) num_classes = 10 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %0 = arch.identity %x : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %1 = arch.identity %x : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %2 = arch.add %0, %1 : tensor<?x8x8x8xf32>, tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  arch.output %2 : tensor<?x8x8x8xf32>
}

// -----

// add2(conv, nothing): the main operand is the input the shortcut branch starts from.

// CHECK: 'arch.add' op expected a non-empty main branch, got the input of the block as main operand
arch.model @empty_main input(8, 8, 8) num_classes = 10 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 1 : tensor<?x8x8x8xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.add %0, %x : tensor<?x?x?x?xf32>, tensor<?x8x8x8xf32> -> tensor<?x?x?x?xf32>
  arch.output %1 : tensor<?x?x?x?xf32>
}

// -----

// The tree form must be expanded first.

// CHECK: 'arch.add2' op is tree form, but arch-normalize-identity needs the flat graph; run arch-expand first
arch.model @tree input(8, 8, 8) num_classes = 10 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %a = arch.add2 %x : tensor<?x8x8x8xf32> -> tensor<?x?x?x?xf32> shortcut {
  ^bb0(%s: tensor<?x8x8x8xf32>):
    arch.yield %s : tensor<?x8x8x8xf32>
  } main {
  ^bb0(%m: tensor<?x8x8x8xf32>):
    %0 = arch.relu %m : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
    arch.yield %0 : tensor<?x8x8x8xf32>
  }
  arch.output %a : tensor<?x?x?x?xf32>
}
