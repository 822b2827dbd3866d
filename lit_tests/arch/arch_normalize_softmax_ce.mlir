// RUN: tr-opt %s --split-input-file --verify-diagnostics -p arch-normalize-softmax-ce | filecheck %s
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'arch-normalize-softmax-ce{num_classes=7}' | filecheck %s --check-prefix=OPT

// One softmax_ce with the model's num_classes is appended on the returned value.

// CHECK-LABEL: arch.model @append input(4, 4, 8) num_classes = 10 {
// CHECK:         %[[F:.*]] = arch.fc %{{.*}} out_features = 10 :
// CHECK-NEXT:    %[[S:.*]] = arch.softmax_ce %[[F]] num_classes = 10 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
// CHECK-NEXT:    arch.output %[[S]]

// The option first rewrites the model's num_classes.
// OPT-LABEL: arch.model @append input(4, 4, 8) num_classes = 7 {
// OPT:         %[[F:.*]] = arch.fc
// OPT-NEXT:    %[[S:.*]] = arch.softmax_ce %[[F]] num_classes = 7 :
// OPT-NEXT:    arch.output %[[S]]
arch.model @append input(4, 4, 8) num_classes = 10 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.fc %x out_features = 10 : tensor<?x4x4x8xf32> -> tensor<?x?x?x?xf32>
  arch.output %0 : tensor<?x?x?x?xf32>
}

// -----

// Existing heads are removed wherever they are (their users read their input); the new one
// is last and keeps the known type of its input. With num_classes=7 the new head does not
// fit the 10 logits: the verifier says so.

// CHECK-LABEL: arch.model @replace
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x1x1x10xf32>):
// CHECK-NEXT:    %[[R:.*]] = arch.relu %[[X]] : tensor<?x1x1x10xf32> -> tensor<?x?x?x?xf32>
// CHECK-NEXT:    %[[R2:.*]] = arch.relu %[[R]] : tensor<?x?x?x?xf32> -> tensor<?x1x1x10xf32>
// CHECK-NEXT:    %[[S:.*]] = arch.softmax_ce %[[R2]] num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
// CHECK-NEXT:    arch.output %[[S]] : tensor<?x1x1x10xf32>
// CHECK-NOT:   arch.softmax_ce

// OPT: 'arch.softmax_ce' op expected input C = num_classes = 7, got C = 10; the last layer must produce 7 logits
arch.model @replace input(1, 1, 10) num_classes = 10 {
^bb0(%x: tensor<?x1x1x10xf32>):
  %0 = arch.relu %x : tensor<?x1x1x10xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.softmax_ce %0 num_classes = 3 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %2 = arch.relu %1 : tensor<?x?x?x?xf32> -> tensor<?x1x1x10xf32>
  %3 = arch.softmax_ce %2 num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %3 : tensor<?x1x1x10xf32>
}

// -----

// An empty model: the head sits on the input. Every model of the module gets one.

// CHECK-LABEL: arch.model @empty
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<?x?x?x?xf32>):
// CHECK-NEXT:    %[[S:.*]] = arch.softmax_ce %[[X]] num_classes = 10 :
// CHECK-NEXT:    arch.output %[[S]]
// CHECK-LABEL: arch.model @second
// CHECK:         arch.softmax_ce %{{.*}} num_classes = 5 :
// OPT-LABEL: arch.model @empty
// OPT:         arch.softmax_ce %{{.*}} num_classes = 7 :
// OPT-LABEL: arch.model @second
// OPT:         arch.softmax_ce %{{.*}} num_classes = 7 :
builtin.module {
  arch.model @empty input(1, 1, 10) num_classes = 10 {
  ^bb0(%x: tensor<?x?x?x?xf32>):
    arch.output %x : tensor<?x?x?x?xf32>
  }
  arch.model @second input(1, 1, 5) num_classes = 5 {
  ^bb0(%x: tensor<?x1x1x5xf32>):
    %0 = arch.gap %x : tensor<?x1x1x5xf32> -> tensor<?x?x?x?xf32>
    arch.output %0 : tensor<?x?x?x?xf32>
  }
}

// -----

// The tree form must be expanded first.

// CHECK: 'arch.seq' op is tree form, but arch-normalize-softmax-ce needs the flat graph; run arch-expand first
// OPT: 'arch.seq' op is tree form, but arch-normalize-softmax-ce needs the flat graph; run arch-expand first
arch.model @tree input(4, 4, 8) num_classes = 10 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %s = arch.seq %x : tensor<?x4x4x8xf32> -> tensor<?x?x?x?xf32> {
  ^bb0(%i: tensor<?x4x4x8xf32>):
    arch.yield %i : tensor<?x4x4x8xf32>
  }
  arch.output %s : tensor<?x?x?x?xf32>
}
