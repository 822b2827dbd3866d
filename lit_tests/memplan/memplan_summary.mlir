// `tr-opt -t memplan-summary`: the conv algorithm mix (here one first-layer 1x1 conv: pointwise, no
// input gradient; without memplan-select-conv-algo the kernels' default, auto), the memory lines (transient pool, liveness lower bound, the node at
// the peak and the largest DTensors live there), then one table per variant (regions with reserved
// and used bytes and DTensor counts, then the GraphIds the variant runs with node counts and
// capture keys).
// RUN: tr-opt %s -p 'memplan-compile{batch_size=4 train_size=10 val_size=8 train_res_end=2}' -t memplan-summary | filecheck %s
// RUN: tr-opt %s -p 'memplan-compile{batch_size=4 train_size=10 val_size=8 train_res_end=2 reuse=false}' -t memplan-summary | filecheck %s --check-prefix=SEED
// RUN: tr-opt %s -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=8},memplan-max-slots,memplan-create-plans,memplan-build-graph' -t memplan-summary | filecheck %s --check-prefix=NOATLAS
// RUN: not tr-opt %s -t memplan-summary 2>&1 | filecheck %s --check-prefix=NOPROGRAM
// RUN: not tr-opt %s -p 'memplan-derive-shapes{batch_size=4 train_size=10 val_size=8}' -t memplan-summary 2>&1 | filecheck %s --check-prefix=NOPLANS

// CHECK:      memplan.program for @net: target cpu, optimizer momentum, fp32, arena 24,064 bytes, 41 DTensors, 2 graphs, 33 capture keys
// CHECK-NEXT: conv algorithms (convs per direction): fwd pointwise 1; dgrad -; wgrad pointwise 1
// CHECK-NEXT: memory: transient pool 6,144 bytes for 12 transient DTensors of 10,240 bytes (placed by lifetime)
// CHECK-NEXT:   liveness lower bound 23,552 bytes = persistent 17,920 + transient peak 5,632; arena / bound 1.022
// CHECK-NEXT:   peak at @train deep_fwd_bwd node 3 (GAP_FP32_BWD): 7 live, largest l1.gap_grad_slot 2,560, l0.conv_sum 512,
// CHECK-EMPTY:
// CHECK-NEXT: variant train_base: batch 4, resolution 4, plan @plan_train_base train @train infer @infer
// CHECK-NEXT:   region                   reserved bytes       used bytes  DTensors
// CHECK-NEXT:   W_FIRST_CONV                        512              512         1
// CHECK-NEXT:   A_FIRST_CONV                          0                0         1
// CHECK:        F_FEATURE_FP32                        0            3,584         3
// CHECK:        transient pool                    6,144
// CHECK-NEXT:   total                            24,064           28,160        41
// CHECK-NEXT:   GraphId                        graph     nodes   key
// CHECK-NEXT:   transfer_a                     @train        1     0
// CHECK:        deep_fwd_bwd                   @train        4     4
// CHECK-NOT:    zero_grad
// CHECK:        total                                       21
// The lowres variant uses less of the shared slots, and has its own shape-dependent keys.
// CHECK:      variant train_lowres: batch 4, resolution 2, plan @plan_train_lowres train @train infer @infer
// CHECK:        F_FEATURE_FP32                        0            2,048         3
// CHECK:        total                            24,064           25,088        41
// CHECK:        deep_fwd_bwd                   @train        4    23
// CHECK:      variant val_last: batch 4, resolution 4, plan @plan_val_last infer @infer
// CHECK-NOT:    deep_fwd_bwd
// CHECK:        inf_main_a                     @infer        4    31
// CHECK:        total                                       18

// The seed's layout (reuse=false): every transient DTensor in its own slot of its region.
// SEED:      memplan.program for @net: target cpu, optimizer momentum, fp32, arena 28,160 bytes, 41 DTensors, 2 graphs, 33 capture keys
// SEED-NEXT: conv algorithms (convs per direction): fwd pointwise 1; dgrad -; wgrad pointwise 1
// SEED-NEXT: memory: one slot per DTensor (reuse=false): 12 transient DTensors of 10,240 bytes
// SEED-NEXT:   liveness lower bound 23,552 bytes = persistent 17,920 + transient peak 5,632; arena / bound 1.196
// SEED:        F_FEATURE_FP32                    3,584            3,584         3
// SEED-NOT:    transient pool
// SEED:        total                            28,160           28,160        41

// Without an atlas (before phase 5) the buckets of the graphs are listed, without keys.
// NOATLAS:      memplan.program for @net: target cpu, optimizer momentum, fp32, arena 28,160 bytes, 41 DTensors, 2 graphs
// NOATLAS-NEXT: conv algorithms (convs per direction): fwd auto 1; dgrad -; wgrad auto 1
// NOATLAS:      variant train_base: batch 4, resolution 4
// NOATLAS:        deep_fwd_bwd                   @train        4     -
// NOATLAS:      variant val_base: batch 4, resolution 4
// NOATLAS-NOT:    deep_fwd_bwd
// NOATLAS:        inf_main_a                     @infer        4     -

// NOPROGRAM: tr-opt: error: {{.*}}memplan-summary: the module has no 'memplan.program'; compile it first (tr-compile or memplan-compile)
// NOPLANS: tr-opt: error: {{.*}}'memplan.program' op for @net has no plans; memplan-summary needs a compiled program (run memplan-compile)
arch.model @net input(4, 4, 8) num_classes = 8 first_layer = 0 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.gap %0 : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %2 = arch.softmax_ce %1 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %2 : tensor<?x1x1x8xf32>
}
