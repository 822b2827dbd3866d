// RUN: tr-opt %s -p arch-merge-blocks --split-input-file --verify-diagnostics | filecheck %s

// Bottleneck, identity shortcut (the explicit arch.identity of step 4), post-add relu absorbed.
// CHECK-LABEL: arch.model @bottleneck_identity
// CHECK-NEXT:  ^bb0(%[[X:.*]]: tensor<?x4x4x16xf32>):
// CHECK-NEXT:    %[[B:.*]] = arch.bottleneck_identity %[[X]] bottleneck_ch = 4 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    arch.output %[[B]] : tensor<?x4x4x16xf32>
arch.model @bottleneck_identity input(4, 4, 16) num_classes = 16 {
^bb0(%x: tensor<?x4x4x16xf32>):
  %v1 = arch.identity %x : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v2 = arch.conv %x out_ch = 4 k = 1 : tensor<?x4x4x16xf32> -> tensor<?x4x4x4xf32>
  %v3 = arch.bn2d %v2 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v4 = arch.relu %v3 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v5 = arch.conv %v4 out_ch = 4 k = 3 p = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v6 = arch.bn2d %v5 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v7 = arch.relu %v6 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v8 = arch.conv %v7 out_ch = 16 k = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x16xf32>
  %v9 = arch.bn2d %v8 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v10 = arch.add %v1, %v9 : tensor<?x4x4x16xf32>, tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v11 = arch.relu %v10 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  arch.output %v11 : tensor<?x4x4x16xf32>
}

// -----

// An empty shortcut may also be the block input itself; consecutive blocks both merge.
// CHECK-LABEL: arch.model @bottleneck_bare_shortcut_twice
// CHECK:         %[[A:.*]] = arch.bottleneck_identity %x bottleneck_ch = 4
// CHECK-NEXT:    %[[B:.*]] = arch.bottleneck_identity %[[A]] bottleneck_ch = 8
// CHECK-NEXT:    arch.output %[[B]]
arch.model @bottleneck_bare_shortcut_twice input(4, 4, 16) num_classes = 16 {
^bb0(%x: tensor<?x4x4x16xf32>):
  %v2 = arch.conv %x out_ch = 4 k = 1 : tensor<?x4x4x16xf32> -> tensor<?x4x4x4xf32>
  %v3 = arch.bn2d %v2 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v4 = arch.relu %v3 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v5 = arch.conv %v4 out_ch = 4 k = 3 p = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v6 = arch.bn2d %v5 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v7 = arch.relu %v6 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v8 = arch.conv %v7 out_ch = 16 k = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x16xf32>
  %v9 = arch.bn2d %v8 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v10 = arch.add %x, %v9 : tensor<?x4x4x16xf32>, tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v11 = arch.relu %v10 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v12 = arch.identity %v11 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v13 = arch.conv %v11 out_ch = 8 k = 1 : tensor<?x4x4x16xf32> -> tensor<?x4x4x8xf32>
  %v14 = arch.bn2d %v13 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %v15 = arch.relu %v14 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %v16 = arch.conv %v15 out_ch = 8 k = 3 p = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %v17 = arch.bn2d %v16 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %v18 = arch.relu %v17 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %v19 = arch.conv %v18 out_ch = 16 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x16xf32>
  %v20 = arch.bn2d %v19 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v21 = arch.add %v12, %v20 : tensor<?x4x4x16xf32>, tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v22 = arch.relu %v21 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  arch.output %v22 : tensor<?x4x4x16xf32>
}

// -----

// Bottleneck with a projection shortcut (conv1x1 stride 2 + bn2d); equal BN parameters are carried.
// CHECK-LABEL: arch.model @bottleneck_projection
// CHECK-NEXT:  ^bb0(%[[X:.*]]: tensor<?x8x8x16xf32>):
// CHECK-NEXT:    %[[B:.*]] = arch.bottleneck_projection %[[X]] bottleneck_ch = 8 out_ch = 32 stride = 2 eps = 1.000000e-03 momentum = 5.000000e-02 : tensor<?x8x8x16xf32> -> tensor<?x4x4x32xf32>
// CHECK-NEXT:    arch.output %[[B]] : tensor<?x4x4x32xf32>
arch.model @bottleneck_projection input(8, 8, 16) num_classes = 32 {
^bb0(%x: tensor<?x8x8x16xf32>):
  %v1 = arch.conv %x out_ch = 32 k = 1 s = 2 : tensor<?x8x8x16xf32> -> tensor<?x4x4x32xf32>
  %v2 = arch.bn2d %v1 eps = 1.0e-03 momentum = 5.0e-02 : tensor<?x4x4x32xf32> -> tensor<?x4x4x32xf32>
  %v3 = arch.conv %x out_ch = 8 k = 1 : tensor<?x8x8x16xf32> -> tensor<?x8x8x8xf32>
  %v4 = arch.bn2d %v3 eps = 1.0e-03 momentum = 5.0e-02 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v5 = arch.relu %v4 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v6 = arch.conv %v5 out_ch = 8 k = 3 s = 2 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x4x4x8xf32>
  %v7 = arch.bn2d %v6 eps = 1.0e-03 momentum = 5.0e-02 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %v8 = arch.relu %v7 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %v9 = arch.conv %v8 out_ch = 32 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x32xf32>
  %v10 = arch.bn2d %v9 eps = 1.0e-03 momentum = 5.0e-02 : tensor<?x4x4x32xf32> -> tensor<?x4x4x32xf32>
  %v11 = arch.add %v2, %v10 : tensor<?x4x4x32xf32>, tensor<?x4x4x32xf32> -> tensor<?x4x4x32xf32>
  %v12 = arch.relu %v11 : tensor<?x4x4x32xf32> -> tensor<?x4x4x32xf32>
  arch.output %v12 : tensor<?x4x4x32xf32>
}

// -----

// Projection without downsampling (the first block of a ResNet-50 stage 1).
// CHECK-LABEL: arch.model @bottleneck_projection_stride_1
// CHECK:         arch.bottleneck_projection %x bottleneck_ch = 4 out_ch = 16 : tensor<?x4x4x8xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    arch.output
arch.model @bottleneck_projection_stride_1 input(4, 4, 8) num_classes = 16 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %v1 = arch.conv %x out_ch = 16 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x16xf32>
  %v2 = arch.bn2d %v1 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v3 = arch.conv %x out_ch = 4 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x4xf32>
  %v4 = arch.bn2d %v3 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v5 = arch.relu %v4 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v6 = arch.conv %v5 out_ch = 4 k = 3 p = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v7 = arch.bn2d %v6 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v8 = arch.relu %v7 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v9 = arch.conv %v8 out_ch = 16 k = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x16xf32>
  %v10 = arch.bn2d %v9 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v11 = arch.add %v2, %v10 : tensor<?x4x4x16xf32>, tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v12 = arch.relu %v11 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  arch.output %v12 : tensor<?x4x4x16xf32>
}

// -----

// Basic blocks: identity (bare shortcut) then projection with stride 2.
// CHECK-LABEL: arch.model @basic_blocks
// CHECK:         %[[A:.*]] = arch.basic_block_identity %x out_ch = 8 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
// CHECK-NEXT:    %[[B:.*]] = arch.basic_block_projection %[[A]] out_ch = 16 stride = 2 : tensor<?x8x8x8xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    arch.output %[[B]]
arch.model @basic_blocks input(8, 8, 8) num_classes = 16 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %v1 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v2 = arch.bn2d %v1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v3 = arch.relu %v2 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v4 = arch.conv %v3 out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v5 = arch.bn2d %v4 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v6 = arch.add %x, %v5 : tensor<?x8x8x8xf32>, tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v7 = arch.relu %v6 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v8 = arch.conv %v7 out_ch = 16 k = 1 s = 2 : tensor<?x8x8x8xf32> -> tensor<?x4x4x16xf32>
  %v9 = arch.bn2d %v8 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v10 = arch.conv %v7 out_ch = 16 k = 3 s = 2 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x4x4x16xf32>
  %v11 = arch.bn2d %v10 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v12 = arch.relu %v11 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v13 = arch.conv %v12 out_ch = 16 k = 3 p = 1 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v14 = arch.bn2d %v13 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v15 = arch.add %v9, %v14 : tensor<?x4x4x16xf32>, tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v16 = arch.relu %v15 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  arch.output %v16 : tensor<?x4x4x16xf32>
}

// -----

// Inverted residual with identity shortcut (no post-add relu), then a plain inverted residual
// without shortcut (stride 2 on the depthwise 3x3).
// CHECK-LABEL: arch.model @inverted_residuals
// CHECK:         %[[A:.*]] = arch.inv_residual_identity %x expand_ch = 48 out_ch = 8 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
// CHECK-NEXT:    %[[B:.*]] = arch.inv_residual_no_shortcut %[[A]] expand_ch = 48 out_ch = 16 stride = 2 : tensor<?x8x8x8xf32> -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    arch.output %[[B]]
arch.model @inverted_residuals input(8, 8, 8) num_classes = 16 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %v1 = arch.identity %x : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v2 = arch.conv %x out_ch = 48 k = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x48xf32>
  %v3 = arch.bn2d %v2 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v4 = arch.relu %v3 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v5 = arch.conv %v4 out_ch = 48 k = 3 p = 1 groups = 48 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v6 = arch.bn2d %v5 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v7 = arch.relu %v6 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v8 = arch.conv %v7 out_ch = 8 k = 1 : tensor<?x8x8x48xf32> -> tensor<?x8x8x8xf32>
  %v9 = arch.bn2d %v8 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v10 = arch.add %v1, %v9 : tensor<?x8x8x8xf32>, tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v11 = arch.conv %v10 out_ch = 48 k = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x48xf32>
  %v12 = arch.bn2d %v11 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v13 = arch.relu %v12 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v14 = arch.conv %v13 out_ch = 48 k = 3 s = 2 p = 1 groups = 48 : tensor<?x8x8x48xf32> -> tensor<?x4x4x48xf32>
  %v15 = arch.bn2d %v14 : tensor<?x4x4x48xf32> -> tensor<?x4x4x48xf32>
  %v16 = arch.relu %v15 : tensor<?x4x4x48xf32> -> tensor<?x4x4x48xf32>
  %v17 = arch.conv %v16 out_ch = 16 k = 1 : tensor<?x4x4x48xf32> -> tensor<?x4x4x16xf32>
  %v18 = arch.bn2d %v17 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  arch.output %v18 : tensor<?x4x4x16xf32>
}

// -----

// A bottleneck-shaped region without the post-add relu does not merge (and its dense 3x3 is
// not an inverted residual).
// CHECK-LABEL: arch.model @bottleneck_without_post_relu
// CHECK-NOT:     arch.bottleneck
// CHECK-NOT:     arch.inv_residual
// CHECK:         arch.add
// CHECK-NEXT:    arch.output
arch.model @bottleneck_without_post_relu input(4, 4, 16) num_classes = 16 {
^bb0(%x: tensor<?x4x4x16xf32>):
  %v1 = arch.identity %x : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v2 = arch.conv %x out_ch = 4 k = 1 : tensor<?x4x4x16xf32> -> tensor<?x4x4x4xf32>
  %v3 = arch.bn2d %v2 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v4 = arch.relu %v3 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v5 = arch.conv %v4 out_ch = 4 k = 3 p = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v6 = arch.bn2d %v5 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v7 = arch.relu %v6 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v8 = arch.conv %v7 out_ch = 16 k = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x16xf32>
  %v9 = arch.bn2d %v8 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v10 = arch.add %v1, %v9 : tensor<?x4x4x16xf32>, tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  arch.output %v10 : tensor<?x4x4x16xf32>
}

// -----

// An inverted-residual region followed by a relu is not an inverted residual block; its main
// branch alone is still an exact shortcut-free inverted residual (after a relu: a chain reading
// the model input does not merge, @no_shortcut_on_model_input).
// CHECK-LABEL: arch.model @inverted_residual_with_post_relu
// CHECK:         %[[S:.*]] = arch.identity %x
// CHECK-NEXT:    %[[M:.*]] = arch.inv_residual_no_shortcut %x expand_ch = 48 out_ch = 8 :
// CHECK-NEXT:    %[[A:.*]] = arch.add %[[S]], %[[M]]
// CHECK-NEXT:    arch.relu %[[A]]
// CHECK-NOT:     arch.inv_residual_identity
arch.model @inverted_residual_with_post_relu input(8, 8, 8) num_classes = 8 {
^bb0(%in: tensor<?x8x8x8xf32>):
  %x = arch.relu %in : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v1 = arch.identity %x : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v2 = arch.conv %x out_ch = 48 k = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x48xf32>
  %v3 = arch.bn2d %v2 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v4 = arch.relu %v3 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v5 = arch.conv %v4 out_ch = 48 k = 3 p = 1 groups = 48 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v6 = arch.bn2d %v5 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v7 = arch.relu %v6 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v8 = arch.conv %v7 out_ch = 8 k = 1 : tensor<?x8x8x48xf32> -> tensor<?x8x8x8xf32>
  %v9 = arch.bn2d %v8 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v10 = arch.add %v1, %v9 : tensor<?x8x8x8xf32>, tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v11 = arch.relu %v10 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  arch.output %v11 : tensor<?x8x8x8xf32>
}

// -----

// The last bn2d of the stem is also read after the block: no merge.
// CHECK-LABEL: arch.model @stem_value_extra_user
// CHECK-NOT:     arch.bottleneck_identity
// CHECK:         arch.identity
// CHECK:         arch.add
// CHECK-NEXT:    arch.relu
// CHECK-NEXT:    arch.add
arch.model @stem_value_extra_user input(4, 4, 16) num_classes = 16 {
^bb0(%x: tensor<?x4x4x16xf32>):
  %v1 = arch.identity %x : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v2 = arch.conv %x out_ch = 4 k = 1 : tensor<?x4x4x16xf32> -> tensor<?x4x4x4xf32>
  %v3 = arch.bn2d %v2 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v4 = arch.relu %v3 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v5 = arch.conv %v4 out_ch = 4 k = 3 p = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v6 = arch.bn2d %v5 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v7 = arch.relu %v6 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v8 = arch.conv %v7 out_ch = 16 k = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x16xf32>
  %v9 = arch.bn2d %v8 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v10 = arch.add %v1, %v9 : tensor<?x4x4x16xf32>, tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v11 = arch.relu %v10 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %y = arch.add %v11, %v9 : tensor<?x4x4x16xf32>, tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  arch.output %y : tensor<?x4x4x16xf32>
}

// -----

// The relu is not the add's only user, so there is no post-add relu: no merge.
// CHECK-LABEL: arch.model @add_has_two_users
// CHECK-NOT:     arch.bottleneck_identity
// CHECK:         arch.conv
arch.model @add_has_two_users input(4, 4, 16) num_classes = 16 {
^bb0(%x: tensor<?x4x4x16xf32>):
  %v1 = arch.identity %x : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v2 = arch.conv %x out_ch = 4 k = 1 : tensor<?x4x4x16xf32> -> tensor<?x4x4x4xf32>
  %v3 = arch.bn2d %v2 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v4 = arch.relu %v3 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v5 = arch.conv %v4 out_ch = 4 k = 3 p = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v6 = arch.bn2d %v5 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v7 = arch.relu %v6 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v8 = arch.conv %v7 out_ch = 16 k = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x16xf32>
  %v9 = arch.bn2d %v8 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v10 = arch.add %v1, %v9 : tensor<?x4x4x16xf32>, tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v11 = arch.relu %v10 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %y = arch.add %v10, %v11 : tensor<?x4x4x16xf32>, tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  arch.output %y : tensor<?x4x4x16xf32>
}

// -----

// The shortcut's arch.identity is read elsewhere too: no merge.
// CHECK-LABEL: arch.model @identity_extra_user
// CHECK-NOT:     arch.bottleneck_identity
// CHECK:         arch.identity
arch.model @identity_extra_user input(4, 4, 16) num_classes = 16 {
^bb0(%x: tensor<?x4x4x16xf32>):
  %v1 = arch.identity %x : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v2 = arch.conv %x out_ch = 4 k = 1 : tensor<?x4x4x16xf32> -> tensor<?x4x4x4xf32>
  %v3 = arch.bn2d %v2 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v4 = arch.relu %v3 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v5 = arch.conv %v4 out_ch = 4 k = 3 p = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v6 = arch.bn2d %v5 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v7 = arch.relu %v6 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v8 = arch.conv %v7 out_ch = 16 k = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x16xf32>
  %v9 = arch.bn2d %v8 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v10 = arch.add %v1, %v9 : tensor<?x4x4x16xf32>, tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v11 = arch.relu %v10 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %y = arch.add %v1, %v11 : tensor<?x4x4x16xf32>, tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  arch.output %y : tensor<?x4x4x16xf32>
}

// -----

// The batch norms of the block disagree on eps: a fused block carries one pair, so no merge.
// CHECK-LABEL: arch.model @bn_params_disagree
// CHECK-NOT:     arch.bottleneck_identity
// CHECK:         arch.bn2d %{{.*}} eps = 1.000000e-03
arch.model @bn_params_disagree input(4, 4, 16) num_classes = 16 {
^bb0(%x: tensor<?x4x4x16xf32>):
  %v1 = arch.identity %x : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v2 = arch.conv %x out_ch = 4 k = 1 : tensor<?x4x4x16xf32> -> tensor<?x4x4x4xf32>
  %v3 = arch.bn2d %v2 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v4 = arch.relu %v3 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v5 = arch.conv %v4 out_ch = 4 k = 3 p = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v6 = arch.bn2d %v5 eps = 1.0e-03 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v7 = arch.relu %v6 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v8 = arch.conv %v7 out_ch = 16 k = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x16xf32>
  %v9 = arch.bn2d %v8 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v10 = arch.add %v1, %v9 : tensor<?x4x4x16xf32>, tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v11 = arch.relu %v10 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  arch.output %v11 : tensor<?x4x4x16xf32>
}

// -----

// The projection's bn2d disagrees on momentum: no merge.
// CHECK-LABEL: arch.model @projection_bn_disagrees
// CHECK-NOT:     arch.bottleneck_projection
// CHECK:         arch.add
arch.model @projection_bn_disagrees input(8, 8, 16) num_classes = 32 {
^bb0(%x: tensor<?x8x8x16xf32>):
  %v1 = arch.conv %x out_ch = 32 k = 1 s = 2 : tensor<?x8x8x16xf32> -> tensor<?x4x4x32xf32>
  %v2 = arch.bn2d %v1 momentum = 2.0e-01 : tensor<?x4x4x32xf32> -> tensor<?x4x4x32xf32>
  %v3 = arch.conv %x out_ch = 8 k = 1 : tensor<?x8x8x16xf32> -> tensor<?x8x8x8xf32>
  %v4 = arch.bn2d %v3 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v5 = arch.relu %v4 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v6 = arch.conv %v5 out_ch = 8 k = 3 s = 2 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x4x4x8xf32>
  %v7 = arch.bn2d %v6 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %v8 = arch.relu %v7 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %v9 = arch.conv %v8 out_ch = 32 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x32xf32>
  %v10 = arch.bn2d %v9 : tensor<?x4x4x32xf32> -> tensor<?x4x4x32xf32>
  %v11 = arch.add %v2, %v10 : tensor<?x4x4x32xf32>, tensor<?x4x4x32xf32> -> tensor<?x4x4x32xf32>
  %v12 = arch.relu %v11 : tensor<?x4x4x32xf32> -> tensor<?x4x4x32xf32>
  arch.output %v12 : tensor<?x4x4x32xf32>
}

// -----

// The 3x3 conv is wider than the first 1x1 (8 != 4): not a bottleneck.
// CHECK-LABEL: arch.model @bottleneck_width_mismatch
// CHECK-NOT:     arch.bottleneck
// CHECK:         arch.add
arch.model @bottleneck_width_mismatch input(4, 4, 16) num_classes = 16 {
^bb0(%x: tensor<?x4x4x16xf32>):
  %v1 = arch.identity %x : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v2 = arch.conv %x out_ch = 4 k = 1 : tensor<?x4x4x16xf32> -> tensor<?x4x4x4xf32>
  %v3 = arch.bn2d %v2 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v4 = arch.relu %v3 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v5 = arch.conv %v4 out_ch = 8 k = 3 p = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x8xf32>
  %v6 = arch.bn2d %v5 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %v7 = arch.relu %v6 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %v8 = arch.conv %v7 out_ch = 16 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x16xf32>
  %v9 = arch.bn2d %v8 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v10 = arch.add %v1, %v9 : tensor<?x4x4x16xf32>, tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v11 = arch.relu %v10 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  arch.output %v11 : tensor<?x4x4x16xf32>
}

// -----

// The projection's stride (1) differs from the block's (2): no merge.
// CHECK-LABEL: arch.model @projection_stride_mismatch
// CHECK-NOT:     arch.bottleneck_projection
// CHECK:         arch.add
arch.model @projection_stride_mismatch input(1, 1, 8) num_classes = 16 {
^bb0(%x: tensor<?x1x1x8xf32>):
  %v1 = arch.conv %x out_ch = 16 k = 1 : tensor<?x1x1x8xf32> -> tensor<?x1x1x16xf32>
  %v2 = arch.bn2d %v1 : tensor<?x1x1x16xf32> -> tensor<?x1x1x16xf32>
  %v3 = arch.conv %x out_ch = 4 k = 1 : tensor<?x1x1x8xf32> -> tensor<?x1x1x4xf32>
  %v4 = arch.bn2d %v3 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  %v5 = arch.relu %v4 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  %v6 = arch.conv %v5 out_ch = 4 k = 3 s = 2 p = 1 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  %v7 = arch.bn2d %v6 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  %v8 = arch.relu %v7 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  %v9 = arch.conv %v8 out_ch = 16 k = 1 : tensor<?x1x1x4xf32> -> tensor<?x1x1x16xf32>
  %v10 = arch.bn2d %v9 : tensor<?x1x1x16xf32> -> tensor<?x1x1x16xf32>
  %v11 = arch.add %v2, %v10 : tensor<?x1x1x16xf32>, tensor<?x1x1x16xf32> -> tensor<?x1x1x16xf32>
  %v12 = arch.relu %v11 : tensor<?x1x1x16xf32> -> tensor<?x1x1x16xf32>
  arch.output %v12 : tensor<?x1x1x16xf32>
}

// -----

// An identity shortcut around a stride-2 stem is not an identity block (the seed merges it).
// CHECK-LABEL: arch.model @identity_with_stride_2
// CHECK-NOT:     arch.bottleneck_identity
// CHECK:         arch.add
arch.model @identity_with_stride_2 input(1, 1, 16) num_classes = 16 {
^bb0(%x: tensor<?x1x1x16xf32>):
  %v1 = arch.identity %x : tensor<?x1x1x16xf32> -> tensor<?x1x1x16xf32>
  %v2 = arch.conv %x out_ch = 4 k = 1 : tensor<?x1x1x16xf32> -> tensor<?x1x1x4xf32>
  %v3 = arch.bn2d %v2 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  %v4 = arch.relu %v3 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  %v5 = arch.conv %v4 out_ch = 4 k = 3 s = 2 p = 1 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  %v6 = arch.bn2d %v5 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  %v7 = arch.relu %v6 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  %v8 = arch.conv %v7 out_ch = 16 k = 1 : tensor<?x1x1x4xf32> -> tensor<?x1x1x16xf32>
  %v9 = arch.bn2d %v8 : tensor<?x1x1x16xf32> -> tensor<?x1x1x16xf32>
  %v10 = arch.add %v1, %v9 : tensor<?x1x1x16xf32>, tensor<?x1x1x16xf32> -> tensor<?x1x1x16xf32>
  %v11 = arch.relu %v10 : tensor<?x1x1x16xf32> -> tensor<?x1x1x16xf32>
  arch.output %v11 : tensor<?x1x1x16xf32>
}

// -----

// A stem with one more layer (the seed's prefix match would drop it): no merge.
// CHECK-LABEL: arch.model @extra_stem_layer
// CHECK-NOT:     arch.bottleneck
// CHECK:         arch.dropout
// CHECK-NEXT:    arch.add
arch.model @extra_stem_layer input(4, 4, 16) num_classes = 16 {
^bb0(%x: tensor<?x4x4x16xf32>):
  %v1 = arch.identity %x : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v2 = arch.conv %x out_ch = 4 k = 1 : tensor<?x4x4x16xf32> -> tensor<?x4x4x4xf32>
  %v3 = arch.bn2d %v2 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v4 = arch.relu %v3 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v5 = arch.conv %v4 out_ch = 4 k = 3 p = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v6 = arch.bn2d %v5 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v7 = arch.relu %v6 : tensor<?x4x4x4xf32> -> tensor<?x4x4x4xf32>
  %v8 = arch.conv %v7 out_ch = 16 k = 1 : tensor<?x4x4x4xf32> -> tensor<?x4x4x16xf32>
  %v9 = arch.bn2d %v8 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %d = arch.dropout %v9 p = 1.0e-01 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v10 = arch.add %v1, %d : tensor<?x4x4x16xf32>, tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %v11 = arch.relu %v10 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  arch.output %v11 : tensor<?x4x4x16xf32>
}

// -----

// Wrong kind inside the stem (relu6): no merge.
// CHECK-LABEL: arch.model @wrong_activation
// CHECK-NOT:     arch.basic_block
// CHECK:         arch.relu6
arch.model @wrong_activation input(8, 8, 8) num_classes = 8 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %v1 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v2 = arch.bn2d %v1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v3 = arch.relu6 %v2 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v4 = arch.conv %v3 out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v5 = arch.bn2d %v4 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v6 = arch.add %x, %v5 : tensor<?x8x8x8xf32>, tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v7 = arch.relu %v6 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  arch.output %v7 : tensor<?x8x8x8xf32>
}

// -----

// The middle 3x3 has groups = 24 of 48 channels: neither depthwise nor dense, no merge.
// CHECK-LABEL: arch.model @grouped_middle_conv
// CHECK-NOT:     arch.inv_residual
// CHECK:         arch.conv %{{.*}} groups = 24
// CHECK:         arch.add
arch.model @grouped_middle_conv input(8, 8, 8) num_classes = 8 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %v1 = arch.identity %x : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v2 = arch.conv %x out_ch = 48 k = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x48xf32>
  %v3 = arch.bn2d %v2 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v4 = arch.relu %v3 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v5 = arch.conv %v4 out_ch = 48 k = 3 p = 1 groups = 24 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v6 = arch.bn2d %v5 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v7 = arch.relu %v6 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v8 = arch.conv %v7 out_ch = 8 k = 1 : tensor<?x8x8x48xf32> -> tensor<?x8x8x8xf32>
  %v9 = arch.bn2d %v8 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v10 = arch.add %v1, %v9 : tensor<?x8x8x8xf32>, tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  arch.output %v10 : tensor<?x8x8x8xf32>
}

// -----

// An inverted residual has no projection form: the add stays, only the shortcut-free main
// chain fuses (it starts after a relu, as the previous case).
// CHECK-LABEL: arch.model @inverted_with_projection
// CHECK:         %[[C:.*]] = arch.conv %x out_ch = 16 k = 1
// CHECK-NEXT:    %[[B:.*]] = arch.bn2d %[[C]]
// CHECK-NEXT:    %[[M:.*]] = arch.inv_residual_no_shortcut %x expand_ch = 48 out_ch = 16 :
// CHECK-NEXT:    arch.add %[[B]], %[[M]]
arch.model @inverted_with_projection input(8, 8, 8) num_classes = 16 {
^bb0(%in: tensor<?x8x8x8xf32>):
  %x = arch.relu %in : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v1 = arch.conv %x out_ch = 16 k = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x16xf32>
  %v2 = arch.bn2d %v1 : tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  %v3 = arch.conv %x out_ch = 48 k = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x48xf32>
  %v4 = arch.bn2d %v3 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v5 = arch.relu %v4 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v6 = arch.conv %v5 out_ch = 48 k = 3 p = 1 groups = 48 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v7 = arch.bn2d %v6 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v8 = arch.relu %v7 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v9 = arch.conv %v8 out_ch = 16 k = 1 : tensor<?x8x8x48xf32> -> tensor<?x8x8x16xf32>
  %v10 = arch.bn2d %v9 : tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  %v11 = arch.add %v2, %v10 : tensor<?x8x8x16xf32>, tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  arch.output %v11 : tensor<?x8x8x16xf32>
}

// -----

// A residual around a residual: the inner block merges, the outer region (whose main branch is
// the inner block) is not a block and stays.
// CHECK-LABEL: arch.model @nested_residual
// CHECK:         %[[I:.*]] = arch.basic_block_identity %x out_ch = 8
// CHECK-NEXT:    %[[O:.*]] = arch.add %x, %[[I]]
// CHECK-NEXT:    arch.relu %[[O]]
arch.model @nested_residual input(8, 8, 8) num_classes = 8 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %v1 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v2 = arch.bn2d %v1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v3 = arch.relu %v2 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v4 = arch.conv %v3 out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v5 = arch.bn2d %v4 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v6 = arch.add %x, %v5 : tensor<?x8x8x8xf32>, tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %v7 = arch.relu %v6 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %o = arch.add %x, %v7 : tensor<?x8x8x8xf32>, tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %r = arch.relu %o : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  arch.output %r : tensor<?x8x8x8xf32>
}

// -----

// A block nested in a tree-form region is not part of the flat plan: left alone.
// CHECK-LABEL: arch.model @in_tree_region
// CHECK-NOT:     arch.basic_block
// CHECK:         arch.yield
arch.model @in_tree_region input(8, 8, 8) num_classes = 8 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %s = arch.seq %x : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32> {
  ^bb1(%in: tensor<?x8x8x8xf32>):
    %v1 = arch.conv %in out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
    %v2 = arch.bn2d %v1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
    %v3 = arch.relu %v2 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
    %v4 = arch.conv %v3 out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
    %v5 = arch.bn2d %v4 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
    %v6 = arch.add %in, %v5 : tensor<?x8x8x8xf32>, tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
    %v7 = arch.relu %v6 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
    arch.yield %v7 : tensor<?x8x8x8xf32>
  }
  arch.output %s : tensor<?x8x8x8xf32>
}

// -----

// A shortcut-free inverted residual that reads the model input does not merge: its first conv
// is the first layer, which a fused op cannot be (memplan-derive-shapes refuses it). Unfused and
// fused, such a model (mbconv first) compiles and trains the same.
// CHECK-LABEL: arch.model @no_shortcut_on_model_input
// CHECK-NOT:     arch.inv_residual_no_shortcut
// CHECK:         arch.conv %x out_ch = 48 k = 1
// CHECK:         arch.conv {{.*}} groups = 48
// CHECK-NOT:     arch.inv_residual_no_shortcut
arch.model @no_shortcut_on_model_input input(8, 8, 8) num_classes = 16 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %v3 = arch.conv %x out_ch = 48 k = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x48xf32>
  %v4 = arch.bn2d %v3 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v5 = arch.relu %v4 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v6 = arch.conv %v5 out_ch = 48 k = 3 p = 1 groups = 48 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v7 = arch.bn2d %v6 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v8 = arch.relu %v7 : tensor<?x8x8x48xf32> -> tensor<?x8x8x48xf32>
  %v9 = arch.conv %v8 out_ch = 16 k = 1 : tensor<?x8x8x48xf32> -> tensor<?x8x8x16xf32>
  %v10 = arch.bn2d %v9 : tensor<?x8x8x16xf32> -> tensor<?x8x8x16xf32>
  arch.output %v10 : tensor<?x8x8x16xf32>
}

// -----

// Diagnostic: shapes are not deduced, so the identity shortcut's channels cannot be checked.
// CHECK: 'arch.add' op expected a static NHWC block input type to merge a basic block, got tensor<?x?x?x?xf32>; run arch-deduce-shapes before arch-merge-blocks
arch.model @dynamic_types input(8, 8, 8) num_classes = 8 {
^bb0(%x: tensor<?x?x?x?xf32>):
  %v1 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %v2 = arch.bn2d %v1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %v3 = arch.relu %v2 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %v4 = arch.conv %v3 out_ch = 8 k = 3 p = 1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %v5 = arch.bn2d %v4 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %v6 = arch.add %x, %v5 : tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %v7 = arch.relu %v6 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %v7 : tensor<?x?x?x?xf32>
}

// -----

// Diagnostic: a static input but a result type that is not deduced.
// CHECK: 'arch.add' op expected a static NHWC result type to merge a basic block, got tensor<?x?x?x?xf32>; run arch-deduce-shapes before arch-merge-blocks
arch.model @dynamic_result input(8, 8, 8) num_classes = 8 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %v1 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x?x?x?xf32>
  %v2 = arch.bn2d %v1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %v3 = arch.relu %v2 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %v4 = arch.conv %v3 out_ch = 8 k = 3 p = 1 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %v5 = arch.bn2d %v4 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %v6 = arch.add %x, %v5 : tensor<?x8x8x8xf32>, tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %v7 = arch.relu %v6 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %v7 : tensor<?x?x?x?xf32>
}
