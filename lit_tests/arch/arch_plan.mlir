// The arch-plan pipeline: expand, then the seed's build order; fusion only with fuse.
// RUN: tr-opt %s --split-input-file -p 'arch-plan{fuse=false}' | filecheck %s --check-prefix=UNFUSED
// RUN: tr-opt %s --split-input-file --pass-pipeline='builtin.module(arch-plan{fuse=true})' | filecheck %s --check-prefix=FUSED
// RUN: tr-opt %s --split-input-file -p 'arch-plan{fuse=true amp=true cbrp=true}' | filecheck %s --check-prefix=CBRP
// RUN: tr-opt %s --split-input-file -p 'arch-plan{num_classes=7}' --verify-diagnostics | filecheck %s --check-prefix=CLASSES
// Facts sheet 7(a): ResNet-50 from the zoo's example file.
// RUN: tr-opt %S/../../examples/resnet50.mlir --pass-pipeline='builtin.module(arch-plan{fuse=true amp=true num_classes=1000})' -t archplan-yaml | filecheck %s --check-prefix=R50
// RUN: tr-opt %S/../../examples/resnet50.mlir -p 'arch-plan{fuse=false}' | filecheck %s --check-prefix=R50U
// A compiled module (it holds a memplan.program) is not re-planned: the program would go stale.
// RUN: not tr-opt %S/../../examples/mlp_digits.mlir -p 'tr-compile{batch_size=8 train_size=80 val_size=16},arch-plan{fuse=false}' 2>&1 | filecheck %s --check-prefix=STALE
// STALE: tr-opt: error: {{.*}}arch-plan: the module already holds a memplan program compiled from its model; re-planning the model would leave that program stale
// STALE-NEXT: tr-opt: note: in pass 'arch-plan'
// STALE-NOT: Traceback

// A small residual net: cbrp stem, one basic block with identity shortcut, gap_fc head.
arch.model @tiny input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %0 = arch.seq %x : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32> {
  ^bb0(%a: tensor<?x8x8x3xf32>):
    %1 = arch.cbrp %a out_ch = 16 conv(3, 1, 1) pool(2, 2, 0) : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
    %2 = arch.block %1 resnet_3_3 out_ch = 16 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    %3 = arch.gap_fc %2 out_features = 10 bias : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
    arch.yield %3 : tensor<?x?x?x?xf32>
  }
  arch.output %0 : tensor<?x?x?x?xf32>
}

// UNFUSED-LABEL: arch.model @tiny input(8, 8, 3) num_classes = 10 first_layer = 0 {
// UNFUSED:         arch.conv {{.*}} out_ch = 16 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x16xf32>
// UNFUSED-NEXT:    arch.bn2d
// UNFUSED-NEXT:    arch.relu
// UNFUSED-NEXT:    arch.maxpool {{.*}} k = 2 s = 2 : tensor<?x8x8x16xf32> -> tensor<?x4x4x16xf32>
// UNFUSED-NEXT:    arch.identity
// UNFUSED-NEXT:    arch.conv
// UNFUSED-NEXT:    arch.bn2d
// UNFUSED-NEXT:    arch.relu
// UNFUSED-NEXT:    arch.conv
// UNFUSED-NEXT:    arch.bn2d
// UNFUSED-NEXT:    arch.add
// UNFUSED-NEXT:    arch.relu
// UNFUSED-NEXT:    arch.gap
// UNFUSED-NEXT:    arch.fc {{.*}} out_features = 10 bias : tensor<?x1x1x16xf32> -> tensor<?x1x1x10xf32>
// UNFUSED-NEXT:    arch.softmax_ce {{.*}} num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
// UNFUSED-NEXT:    arch.output

// FUSED-LABEL: arch.model @tiny input(8, 8, 3) num_classes = 10 fuse first_layer = 0 {
// FUSED:         arch.cbr {{.*}} out_ch = 16 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x16xf32>
// FUSED-NEXT:    arch.maxpool
// FUSED-NEXT:    arch.basic_block_identity {{.*}} out_ch = 16 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
// FUSED-NEXT:    arch.gap_fc {{.*}} out_features = 10 bias : tensor<?x4x4x16xf32> -> tensor<?x1x1x10xf32>
// FUSED-NEXT:    arch.softmax_ce
// FUSED-NEXT:    arch.output

// With cbrp=true the quadruple merge runs before the triple merge; amp aligns C to 4. The
// conv + bn + relu + maxpool here reads the model input: a cbrp cannot be the first layer
// (memplan-derive-shapes refuses it), so it stays a cbr and a maxpool, as without cbrp.
// CBRP-LABEL: arch.model @tiny input(8, 8, 4) num_classes = 10 amp fuse first_layer = 0 {
// CBRP:         arch.cbr {{.*}} out_ch = 16 k = 3 p = 1 : tensor<?x8x8x4xf32> -> tensor<?x8x8x16xf32>
// CBRP-NEXT:    arch.maxpool
// CBRP-NEXT:    arch.basic_block_identity

// num_classes=7 rewrites the model, then the head no longer matches the fc: a diagnostic.
// CLASSES: 'arch.softmax_ce' op expected input C = num_classes = 7, got C = 10

// -----

// A model whose fuse flag is already set needs no option to fuse.
arch.model @flagged input(4, 4, 8) num_classes = 4 fuse {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.gap %x : tensor<?x4x4x8xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.fc %0 out_features = 4 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %1 : tensor<?x?x?x?xf32>
}

// UNFUSED-LABEL: arch.model @flagged
// UNFUSED:         arch.gap
// UNFUSED-NEXT:    arch.fc
// FUSED-LABEL: arch.model @flagged
// FUSED:         arch.gap_fc {{.*}} out_features = 4 : tensor<?x4x4x8xf32> -> tensor<?x1x1x4xf32>
// CLASSES:     expected input C = num_classes = 7, got C = 4

// -----

// A cbrp after the first layer fuses with cbrp=true (the quadruple merge runs before the triple
// merge), the first layer's conv + bn + relu becomes a cbr.
arch.model @cbrp_second input(8, 8, 4) num_classes = 4 {
^bb0(%x: tensor<?x8x8x4xf32>):
  %0 = arch.cbr %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x4xf32> -> tensor<?x?x?x?xf32>
  %1 = arch.cbrp %0 out_ch = 8 conv(3, 1, 1) pool(2, 2, 0) : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %2 = arch.gap_fc %1 out_features = 4 bias : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %2 : tensor<?x?x?x?xf32>
}

// UNFUSED-LABEL: arch.model @cbrp_second
// FUSED-LABEL: arch.model @cbrp_second
// FUSED:         arch.cbr
// FUSED-NEXT:    arch.cbr
// FUSED-NEXT:    arch.maxpool
// CBRP-LABEL: arch.model @cbrp_second
// CBRP:         arch.cbr {{.*}} out_ch = 8 k = 3 p = 1 : tensor<?x8x8x4xf32> -> tensor<?x8x8x8xf32>
// CBRP-NEXT:    arch.cbrp {{.*}} out_ch = 8 conv(3, 1, 1) pool(2, 2, 0) : tensor<?x8x8x8xf32> -> tensor<?x4x4x8xf32>
// CBRP-NEXT:    arch.gap_fc
// CLASSES:     expected input C = num_classes = 7, got C = 4

// R50: first_layer_index: 0
// R50:  c: 4
// R50:  h: 224
// R50-COUNT-1: kind: CBR
// R50:         kind: MaxPool
// R50-COUNT-4: kind: Bottleneck
// R50:         kind: GapFC
// R50:         kind: SoftmaxCE
// R50:         version: ArchPlan-1.0

// R50U-LABEL: arch.model @resnet50 input(224, 224, 3) num_classes = 1000 first_layer = 0
// R50U:       arch.gap {{.*}} : tensor<?x7x7x2048xf32> -> tensor<?x1x1x2048xf32>
