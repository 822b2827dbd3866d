// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-select-conv-algo{batch_size=8 train_size=16 val_size=8}' | filecheck %s --check-prefixes=CHECK,AUTO
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-select-conv-algo{batch_size=8 train_size=16 val_size=8 conv_algo=im2col}' | filecheck %s --check-prefixes=CHECK,RULE
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-select-conv-algo{batch_size=8 train_size=16 val_size=8 conv_algo=numpy}' | filecheck %s --check-prefix=NUMPY
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-select-conv-algo{batch_size=8 train_size=16 val_size=8 conv_algo=direct}' | filecheck %s --check-prefix=DIRECT
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-select-conv-algo{batch_size=8 train_size=16 val_size=8 conv_algo=numpy conv_algo_wgrad=direct}' | filecheck %s --check-prefix=WGRAD
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-select-conv-algo{batch_size=8 train_size=16 val_size=8 target=cuda}' | filecheck %s --check-prefix=CUDA
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-select-conv-algo{batch_size=8 train_size=16 val_size=8 conv_algo=winograd_4x4_3x3}' | filecheck %s --check-prefix=WINO
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-select-conv-algo{batch_size=8 train_size=16 val_size=8 conv_algo=direct target=cuda}' | filecheck %s --check-prefix=CUDAFORCED
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-compile{batch_size=8 train_size=16 val_size=8}' | filecheck %s --check-prefix=COMPILE
// RUN: tr-opt %s --split-input-file --verify-diagnostics -p 'memplan-compile{batch_size=8 train_size=16 val_size=8 conv_algo=numpy}' | filecheck %s --check-prefix=COMPILE-NUMPY

// The cost rule (auto) and today's rule (im2col): the first layer (3 -> 8, no input gradient: no
// algo_dgrad) and 8 -> 64 run the direct C kernels (few channels), the basic block's two 3x3
// convs (64 channels, 16x16) Winograd F(4x4, 3x3) under the cost rule and im2col under today's
// rule, the 1x1 conv pointwise, the depthwise conv
// depthwise. numpy: the NumPy method of each geometry. direct where it applies (groups = 1); the
// depthwise conv keeps the rule's choice. One direction forced (wgrad), the others numpy. On cuda
// every conv records auto (one implementation per direction).
// CHECK-LABEL:   arch.model @mix
// CHECK:           arch.cbr %x out_ch = 8 k = 3 p = 1 {conv_algo = {conv_weight = {algo = "direct", algo_wgrad = "direct"}}}
// CHECK-NEXT:      arch.conv %0 out_ch = 64 k = 3 p = 1 {conv_algo = {conv_weight = {algo = "direct", algo_dgrad = "direct", algo_wgrad = "direct"}}}
// RULE-NEXT:       arch.basic_block_identity %1 out_ch = 64 {conv_algo = {c1_conv_weight = {algo = "im2col", algo_dgrad = "im2col", algo_wgrad = "im2col"}, c2_conv_weight = {algo = "im2col", algo_dgrad = "im2col", algo_wgrad = "im2col"}}}
// AUTO-NEXT:       arch.basic_block_identity %1 out_ch = 64 {conv_algo = {c1_conv_weight = {algo = "winograd_4x4_3x3", algo_dgrad = "winograd_4x4_3x3", algo_wgrad = "winograd_4x4_3x3"}, c2_conv_weight = {algo = "winograd_4x4_3x3", algo_dgrad = "winograd_4x4_3x3", algo_wgrad = "winograd_4x4_3x3"}}}
// CHECK-NEXT:      arch.conv %2 out_ch = 64 k = 1 {conv_algo = {conv_weight = {algo = "pointwise", algo_dgrad = "pointwise", algo_wgrad = "pointwise"}}}
// CHECK-NEXT:      arch.conv %3 out_ch = 64 k = 3 p = 1 groups = 64 {conv_algo = {conv_weight = {algo = "depthwise", algo_dgrad = "depthwise", algo_wgrad = "depthwise"}}}
// CHECK-NEXT:      arch.gap %4 :
// NUMPY-LABEL:   arch.model @mix
// NUMPY:           arch.cbr %x out_ch = 8 k = 3 p = 1 {conv_algo = {conv_weight = {algo = "im2col", algo_wgrad = "im2col"}}}
// NUMPY-NEXT:      arch.conv %0 out_ch = 64 k = 3 p = 1 {conv_algo = {conv_weight = {algo = "im2col", algo_dgrad = "im2col", algo_wgrad = "im2col"}}}
// NUMPY-NEXT:      arch.basic_block_identity %1 out_ch = 64 {conv_algo = {c1_conv_weight = {algo = "im2col", algo_dgrad = "im2col", algo_wgrad = "im2col"}, c2_conv_weight = {algo = "im2col", algo_dgrad = "im2col", algo_wgrad = "im2col"}}}
// NUMPY-NEXT:      arch.conv %2 out_ch = 64 k = 1 {conv_algo = {conv_weight = {algo = "pointwise", algo_dgrad = "pointwise", algo_wgrad = "pointwise"}}}
// NUMPY-NEXT:      arch.conv %3 out_ch = 64 k = 3 p = 1 groups = 64 {conv_algo = {conv_weight = {algo = "depthwise", algo_dgrad = "depthwise", algo_wgrad = "depthwise"}}}
// DIRECT-LABEL:  arch.model @mix
// DIRECT:          arch.cbr %x out_ch = 8 k = 3 p = 1 {conv_algo = {conv_weight = {algo = "direct", algo_wgrad = "direct"}}}
// DIRECT-NEXT:     arch.conv %0 out_ch = 64 k = 3 p = 1 {conv_algo = {conv_weight = {algo = "direct", algo_dgrad = "direct", algo_wgrad = "direct"}}}
// DIRECT-NEXT:     arch.basic_block_identity %1 out_ch = 64 {conv_algo = {c1_conv_weight = {algo = "direct", algo_dgrad = "direct", algo_wgrad = "direct"}, c2_conv_weight = {algo = "direct", algo_dgrad = "direct", algo_wgrad = "direct"}}}
// DIRECT-NEXT:     arch.conv %2 out_ch = 64 k = 1 {conv_algo = {conv_weight = {algo = "direct", algo_dgrad = "direct", algo_wgrad = "direct"}}}
// DIRECT-NEXT:     arch.conv %3 out_ch = 64 k = 3 p = 1 groups = 64 {conv_algo = {conv_weight = {algo = "depthwise", algo_dgrad = "depthwise", algo_wgrad = "depthwise"}}}
// WGRAD-LABEL:   arch.model @mix
// WGRAD:           arch.conv %0 out_ch = 64 k = 3 p = 1 {conv_algo = {conv_weight = {algo = "im2col", algo_dgrad = "im2col", algo_wgrad = "direct"}}}
// WGRAD:           arch.conv %3 out_ch = 64 k = 3 p = 1 groups = 64 {conv_algo = {conv_weight = {algo = "depthwise", algo_dgrad = "depthwise", algo_wgrad = "depthwise"}}}
// CUDA-LABEL:    arch.model @mix
// CUDA:            arch.cbr %x out_ch = 8 k = 3 p = 1 {conv_algo = {conv_weight = {algo = "auto", algo_wgrad = "auto"}}}
// CUDA:            arch.conv %3 out_ch = 64 k = 3 p = 1 groups = 64 {conv_algo = {conv_weight = {algo = "auto", algo_dgrad = "auto", algo_wgrad = "auto"}}}
// A Winograd name is accepted as a value and refused while those kernels are not in the build; a
// forced CPU algorithm on cuda is refused.
// Forced F(4x4, 3x3): every dense stride-1 3x3 conv, the first layer included; the 1x1 and the
// depthwise conv keep the rule's choice.
// WINO-LABEL:   arch.model @mix
// WINO:           arch.cbr %x out_ch = 8 k = 3 p = 1 {conv_algo = {conv_weight = {algo = "winograd_4x4_3x3", algo_wgrad = "winograd_4x4_3x3"}}}
// WINO-NEXT:      arch.conv %0 out_ch = 64 k = 3 p = 1 {conv_algo = {conv_weight = {algo = "winograd_4x4_3x3", algo_dgrad = "winograd_4x4_3x3", algo_wgrad = "winograd_4x4_3x3"}}}
// WINO-NEXT:      arch.basic_block_identity %1 out_ch = 64 {conv_algo = {c1_conv_weight = {algo = "winograd_4x4_3x3", algo_dgrad = "winograd_4x4_3x3", algo_wgrad = "winograd_4x4_3x3"}, c2_conv_weight = {algo = "winograd_4x4_3x3", algo_dgrad = "winograd_4x4_3x3", algo_wgrad = "winograd_4x4_3x3"}}}
// WINO-NEXT:      arch.conv %2 out_ch = 64 k = 1 {conv_algo = {conv_weight = {algo = "pointwise", algo_dgrad = "pointwise", algo_wgrad = "pointwise"}}}
// WINO-NEXT:      arch.conv %3 out_ch = 64 k = 3 p = 1 groups = 64 {conv_algo = {conv_weight = {algo = "depthwise", algo_dgrad = "depthwise", algo_wgrad = "depthwise"}}}
// CUDAFORCED: memplan-select-conv-algo: conv algorithm 'direct' selects CPU kernels; target cuda has its implicit GEMM and the Winograd variants (use auto, or winograd_2x2_3x3 / winograd_4x4_3x3)
// Through memplan-compile the choices reach the graphs' params tables, and phase 1 sizes the
// workspaces for them: the direct kernels' scratch (ws_tmp) is planned with the default rule, not
// with numpy (the depthwise conv needs a tmp of its output's size: 8*16*16*64).
// COMPILE:       memplan.descs 1 "arch.conv" names = ["conv_weight", {{.*}} "ws_col", "ws_tmp", "ws_wbuf"]
// COMPILE:       memplan.graph @train params = [{algo = "direct", groups = 1 : i64, k = 3 : i64, out_ch = 8 : i64, p = 1 : i64, s = 1 : i64}
// COMPILE-SAME:    {algo_dgrad = "winograd_4x4_3x3", algo_wgrad = "winograd_4x4_3x3", groups = 1 : i64, k = 3 : i64, out_ch = 64 : i64, p = 1 : i64, s = 1 : i64}
// COMPILE-NUMPY: memplan.descs 1 "arch.conv" names = ["conv_weight", "conv_output", "conv_weight_grad", "conv_amp_w_fp16", "conv_amp_g_fp16", "conv_sum", "conv_sq_sum", "ws_col", "ws_wbuf"]
// COMPILE-NUMPY: memplan.descs 4 "arch.conv" names = [{{.*}} "ws_tmp"] {{.*}} shapes = [{{.*}} 1, 1, 1, 131072,
// COMPILE-NUMPY: memplan.graph @train params = [{algo = "im2col", groups = 1 : i64, k = 3 : i64, out_ch = 8 : i64, p = 1 : i64, s = 1 : i64}
arch.model @mix input(16, 16, 3) num_classes = 10 first_layer = 0 {
^bb0(%x: tensor<?x16x16x3xf32>):
  %0 = arch.cbr %x out_ch = 8 k = 3 p = 1 : tensor<?x16x16x3xf32> -> tensor<?x16x16x8xf32>
  %1 = arch.conv %0 out_ch = 64 k = 3 p = 1 : tensor<?x16x16x8xf32> -> tensor<?x16x16x64xf32>
  %2 = arch.basic_block_identity %1 out_ch = 64 : tensor<?x16x16x64xf32> -> tensor<?x16x16x64xf32>
  %3 = arch.conv %2 out_ch = 64 k = 1 : tensor<?x16x16x64xf32> -> tensor<?x16x16x64xf32>
  %4 = arch.conv %3 out_ch = 64 k = 3 p = 1 groups = 64 : tensor<?x16x16x64xf32> -> tensor<?x16x16x64xf32>
  %5 = arch.gap %4 : tensor<?x16x16x64xf32> -> tensor<?x1x1x64xf32>
  %6 = arch.fc %5 out_features = 10 : tensor<?x1x1x64xf32> -> tensor<?x1x1x10xf32>
  %7 = arch.softmax_ce %6 num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %7 : tensor<?x1x1x10xf32>
}

// -----

// AMP: fp16 operands rule out the direct C kernels (fp32 only), so the few-channel conv runs its
// NumPy method, and forcing direct keeps the rule's choice.
// CHECK-LABEL:  arch.model @amp
// CHECK:          arch.conv %x out_ch = 8 k = 3 p = 1 {conv_algo = {conv_amp_w_fp16 = {algo = "im2col", algo_wgrad = "im2col"}}}
// DIRECT-LABEL: arch.model @amp
// DIRECT:         arch.conv %x out_ch = 8 k = 3 p = 1 {conv_algo = {conv_amp_w_fp16 = {algo = "im2col", algo_wgrad = "im2col"}}}
arch.model @amp input(8, 8, 8) num_classes = 8 amp first_layer = 0 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %1 = arch.gap %0 : tensor<?x8x8x8xf32> -> tensor<?x1x1x8xf32>
  %2 = arch.softmax_ce %1 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %2 : tensor<?x1x1x8xf32>
}

// -----

// A layer's request overrides the options: here numpy for the first conv whatever conv_algo says,
// and the weight gradient of the second forced to im2col (its other directions follow the options).
// CHECK-LABEL:  arch.model @request
// CHECK:          arch.conv %x out_ch = 8 k = 3 p = 1 {conv_algo_request = "numpy", conv_algo = {conv_weight = {algo = "im2col", algo_wgrad = "im2col"}}}
// CHECK-NEXT:     arch.conv %0 out_ch = 16 k = 3 p = 1 {conv_algo_request = {conv_weight = {algo_wgrad = "numpy"}}, conv_algo = {conv_weight = {algo = "direct", algo_dgrad = "direct", algo_wgrad = "im2col"}}}
// DIRECT-LABEL: arch.model @request
// DIRECT:         arch.conv %x out_ch = 8 k = 3 p = 1 {conv_algo_request = "numpy", conv_algo = {conv_weight = {algo = "im2col", algo_wgrad = "im2col"}}}
// DIRECT-NEXT:    arch.conv %0 out_ch = 16 k = 3 p = 1 {conv_algo_request = {conv_weight = {algo_wgrad = "numpy"}}, conv_algo = {conv_weight = {algo = "direct", algo_dgrad = "direct", algo_wgrad = "im2col"}}}
arch.model @request input(8, 8, 4) num_classes = 16 first_layer = 0 {
^bb0(%x: tensor<?x8x8x4xf32>):
  %0 = arch.conv %x out_ch = 8 k = 3 p = 1 {conv_algo_request = "numpy"} : tensor<?x8x8x4xf32> -> tensor<?x8x8x8xf32>
  %1 = arch.conv %0 out_ch = 16 k = 3 p = 1 {conv_algo_request = {conv_weight = {algo_wgrad = "numpy"}}} : tensor<?x8x8x8xf32> -> tensor<?x8x8x16xf32>
  %2 = arch.gap %1 : tensor<?x8x8x16xf32> -> tensor<?x1x1x16xf32>
  %3 = arch.softmax_ce %2 num_classes = 16 : tensor<?x1x1x16xf32> -> tensor<?x1x1x16xf32>
  arch.output %3 : tensor<?x1x1x16xf32>
}

// -----

// A request for an algorithm that does not apply is a diagnostic at the layer naming the conv,
// the direction, the geometry and the variant.
// CHECK: 'arch.conv' op conv_algo_request for conv 'conv_weight' (forward): conv algorithm 'pointwise' does not apply to the conv 8 -> 8 channels, k = 3, s = 1, p = 1, groups = 1 (variant train_base)
arch.model @bad_request input(8, 8, 8) num_classes = 8 first_layer = 0 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 3 p = 1 {conv_algo_request = "pointwise"} : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %1 = arch.gap %0 : tensor<?x8x8x8xf32> -> tensor<?x1x1x8xf32>
  %2 = arch.softmax_ce %1 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %2 : tensor<?x1x1x8xf32>
}

// -----

// A request that is not a string or a dictionary of dictionaries is a diagnostic too.
// CHECK: 'arch.conv' op conv_algo_request must be a string or map weight names to dictionaries of algorithm names, got {conv_weight = "direct"}
arch.model @bad_form input(8, 8, 8) num_classes = 8 first_layer = 0 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 3 p = 1 {conv_algo_request = {conv_weight = "direct"}} : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %1 = arch.gap %0 : tensor<?x8x8x8xf32> -> tensor<?x1x1x8xf32>
  %2 = arch.softmax_ce %1 num_classes = 8 : tensor<?x1x1x8xf32> -> tensor<?x1x1x8xf32>
  arch.output %2 : tensor<?x1x1x8xf32>
}
