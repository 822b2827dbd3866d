// Every verifier error of the arch dialect (dialects/arch/), one case per split-input-file chunk. With
// --verify-diagnostics each failing chunk prints its message (exit 0), so every chunk
// CHECKs its message: a chunk that wrongly verified would leave its CHECK unmatched.
// RUN: tr-opt %s --split-input-file --verify-diagnostics | filecheck %s

// ---- operand and result types (every op checks NHWC rank 4, f32, positive dims) ----

%x = "test.op"() : () -> tensor<8x8x3xf32>
%r = arch.relu %x : tensor<8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.relu' op expected input to be a rank-4 NHWC tensor, got tensor<8x8x3xf32>

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%r = arch.sigmoid %x : tensor<?x8x8x3xf32> -> tensor<?x8x8x3xf16>
// CHECK: 'arch.sigmoid' op expected result element type f32 (AMP is a model attribute, not an element type), got f16

// -----

%x = "test.op"() : () -> tensor<?x0x8x3xf32>
%r = arch.tanh %x : tensor<?x0x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.tanh' op expected positive dims in input, got tensor<?x0x8x3xf32>

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%r = arch.silu %x : tensor<?x8x8x3xf32> -> tensor<?x8x8x4xf32>
// CHECK: 'arch.silu' op result type tensor<?x8x8x4xf32> does not match the deduced shape tensor<?x8x8x3xf32> for input tensor<?x8x8x3xf32>

// ---- arch.conv ----

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%c = arch.conv %x out_ch = 0 k = 3 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.conv' op expected out_ch > 0, got 0

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%c = arch.conv %x out_ch = 8 k = 0 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.conv' op expected k > 0, got 0

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%c = arch.conv %x out_ch = 8 k = 3 groups = 0 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.conv' op expected groups > 0, got 0

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%c = arch.conv %x out_ch = 8 k = 3 s = 0 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.conv' op expected s >= 1, got 0

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%c = arch.conv %x out_ch = 8 k = 3 p = -1 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.conv' op expected p >= 0, got -1

// -----

%x = "test.op"() : () -> tensor<?x8x8x4xf32>
%c = arch.conv %x out_ch = 6 k = 3 groups = 4 : tensor<?x8x8x4xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.conv' op expected out_ch (6) divisible by groups (4)

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%c = arch.conv %x out_ch = 4 k = 3 groups = 2 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.conv' op expected input channels (3) divisible by groups (2)

// -----

%x = "test.op"() : () -> tensor<?x2x2x3xf32>
%c = arch.conv %x out_ch = 8 k = 7 p = 1 : tensor<?x2x2x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.conv' op expected kernel size 7 <= padded input size 2 + 2*1; use a smaller kernel or more padding

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%c = arch.conv %x out_ch = 16 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x8xf32>
// CHECK: 'arch.conv' op result type tensor<?x8x8x8xf32> does not match the deduced shape tensor<?x8x8x16xf32> for input tensor<?x8x8x3xf32>

// ---- pooling ----

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%p = arch.maxpool %x k = 0 s = 1 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.maxpool' op expected k > 0, got 0

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%p = arch.avgpool %x k = 2 s = 0 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.avgpool' op expected s >= 1, got 0

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%p = arch.maxpool %x k = 2 s = 2 p = -1 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.maxpool' op expected p >= 0, got -1

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%p = arch.maxpool %x k = 3 s = 1 p = 2 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.maxpool' op expected padding p (2) <= k/2 (3/2), as PyTorch requires

// -----

%x = "test.op"() : () -> tensor<?x2x2x3xf32>
%p = arch.avgpool %x k = 4 s = 1 : tensor<?x2x2x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.avgpool' op expected pool window size 4 <= padded input size 2 + 2*0; use a smaller pool window or more padding

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%p = arch.avgpool %x k = 2 s = 2 : tensor<?x8x8x3xf32> -> tensor<?x8x8x3xf32>
// CHECK: 'arch.avgpool' op result type tensor<?x8x8x3xf32> does not match the deduced shape tensor<?x4x4x3xf32> for input tensor<?x8x8x3xf32>

// ---- batch norm ----

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%b = arch.bn2d %x eps = 0.0 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.bn2d' op expected eps > 0, got 0.0

// -----

// An infinite eps (the generic form can spell it; the custom form prints it as hex and
// could not read it back).
%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%b = "arch.bn2d"(%x) <{eps = 0x7FF0000000000000 : f64, momentum = 1.000000e-01 : f64}> : (tensor<?x8x8x3xf32>) -> tensor<?x?x?x?xf32>
// CHECK: 'arch.bn2d' op expected a finite eps, got inf

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%b = arch.bn %x momentum = 1.5 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.bn' op expected momentum in [0, 1], got 1.5

// -----

%x = "test.op"() : () -> tensor<?x1x1x8xf32>
%b = arch.bn1d %x eps = -1.0 momentum = -0.5 : tensor<?x1x1x8xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.bn1d' op expected eps > 0, got -1.0

// ---- fc, gap_fc, flatten, softmax_ce, dropout ----

// -----

%x = "test.op"() : () -> tensor<?x1x1x8xf32>
%f = arch.fc %x out_features = 0 : tensor<?x1x1x8xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.fc' op expected out_features > 0, got 0

// -----

%x = "test.op"() : () -> tensor<?x4x4x8xf32>
%f = arch.gap_fc %x out_features = -3 bias : tensor<?x4x4x8xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.gap_fc' op expected out_features > 0, got -3

// -----

%x = "test.op"() : () -> tensor<?x4x4x8xf32>
%f = arch.fc %x out_features = 10 : tensor<?x4x4x8xf32> -> tensor<?x1x1x12xf32>
// CHECK: 'arch.fc' op result type tensor<?x1x1x12xf32> does not match the deduced shape tensor<?x1x1x10xf32> for input tensor<?x4x4x8xf32>

// -----

%x = "test.op"() : () -> tensor<?x4x4x8xf32>
%f = arch.flatten %x start_dim = 2 : tensor<?x4x4x8xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.flatten' op expected start_dim = 1 (flatten all but the batch), got 2

// -----

%x = "test.op"() : () -> tensor<?x1x1x10xf32>
%s = arch.softmax_ce %x num_classes = 0 : tensor<?x1x1x10xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.softmax_ce' op expected num_classes > 0, got 0

// -----

%x = "test.op"() : () -> tensor<?x1x1x5xf32>
%s = arch.softmax_ce %x num_classes = 10 : tensor<?x1x1x5xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.softmax_ce' op expected input C = num_classes = 10, got C = 5; the last layer must produce 10 logits

// -----

%x = "test.op"() : () -> tensor<?x1x1x8xf32>
%d = arch.dropout %x p = 1.0 : tensor<?x1x1x8xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.dropout' op expected dropout p in [0, 1), got 1.0

// -----

%x = "test.op"() : () -> tensor<?x1x1x8xf32>
%d = arch.dropout %x p = -0.25 : tensor<?x1x1x8xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.dropout' op expected dropout p in [0, 1), got -0.25

// ---- arch.add ----

// -----

%a = "test.op"() : () -> tensor<?x8x8x16xf32>
%b = "test.op"() : () -> tensor<?x8x8x8xf32>
%s = arch.add %a, %b : tensor<?x8x8x16xf32>, tensor<?x8x8x8xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.add' op expected shortcut, main and result of one shape, got tensor<?x8x8x16xf32>, tensor<?x8x8x8xf32> -> tensor<?x?x?x?xf32> (dim C differs)

// -----

%a = "test.op"() : () -> tensor<?x8x8x16xf32>
%b = "test.op"() : () -> tensor<?x?x?x16xf32>
%s = arch.add %a, %b : tensor<?x8x8x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x4x8x16xf32>
// CHECK: 'arch.add' op expected shortcut, main and result of one shape, got tensor<?x8x8x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x4x8x16xf32> (dim H differs)

// -----

%a = "test.op"() : () -> tensor<?x8x8x16xf32>
%b = "test.op"() : () -> tensor<8x16xf32>
%s = arch.add %a, %b : tensor<?x8x8x16xf32>, tensor<8x16xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.add' op expected main to be a rank-4 NHWC tensor, got tensor<8x16xf32>

// ---- fused kinds ----

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%c = arch.cbr %x out_ch = 8 k = 0 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.cbr' op expected k > 0, got 0

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%c = arch.cbr %x out_ch = 8 k = 3 s = 0 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.cbr' op expected s >= 1, got 0

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%c = arch.cbr %x out_ch = 8 k = 3 p = -2 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.cbr' op expected p >= 0, got -2

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%c = arch.cbr %x out_ch = 8 k = 3 eps = 0.0 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.cbr' op expected eps > 0, got 0.0

// -----

%x = "test.op"() : () -> tensor<?x2x2x3xf32>
%c = arch.cbr %x out_ch = 8 k = 5 : tensor<?x2x2x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.cbr' op expected kernel size 5 <= padded input size 2 + 2*0; use a smaller kernel or more padding

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%c = arch.cbrp %x out_ch = 8 conv(3, 1, 1) pool(3, 2, 2) : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.cbrp' op expected pool padding (2) <= pool_k/2 (3/2)

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%c = arch.cbrp %x out_ch = 8 conv(3, 0, 1) pool(2, 2, 0) : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.cbrp' op expected conv_s >= 1, got 0

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%c = arch.cbrp %x out_ch = 8 conv(3, 1, 1) pool(2, 2, -1) : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.cbrp' op expected pool_p >= 0, got -1

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%c = arch.cbrp %x out_ch = 0 conv(3, 1, 1) pool(2, 2, 0) : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.cbrp' op expected out_ch > 0, got 0

// -----

%x = "test.op"() : () -> tensor<?x4x4x3xf32>
%c = arch.cbrp %x out_ch = 8 conv(3, 1, 1) pool(8, 1, 0) : tensor<?x4x4x3xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.cbrp' op expected pool window size 8 <= padded input size 4 + 2*0; use a smaller pool window or more padding

// -----

%x = "test.op"() : () -> tensor<?x8x8x64xf32>
%c = arch.bottleneck_identity %x bottleneck_ch = 0 : tensor<?x8x8x64xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.bottleneck_identity' op expected bottleneck_ch > 0, got 0

// -----

%x = "test.op"() : () -> tensor<?x8x8x64xf32>
%c = arch.bottleneck_projection %x bottleneck_ch = 16 out_ch = 128 stride = 0 : tensor<?x8x8x64xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.bottleneck_projection' op expected stride >= 1, got 0

// -----

%x = "test.op"() : () -> tensor<?x8x8x64xf32>
%c = arch.bottleneck_projection %x bottleneck_ch = 16 out_ch = 128 stride = 2 : tensor<?x8x8x64xf32> -> tensor<?x8x8x128xf32>
// CHECK: 'arch.bottleneck_projection' op result type tensor<?x8x8x128xf32> does not match the deduced shape tensor<?x4x4x128xf32> for input tensor<?x8x8x64xf32>

// -----

%x = "test.op"() : () -> tensor<?x8x8x64xf32>
%c = arch.basic_block_identity %x out_ch = 128 : tensor<?x8x8x64xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.basic_block_identity' op expected input C = 128 (identity shortcut), got C = 64

// -----

%x = "test.op"() : () -> tensor<?x8x8x64xf32>
%c = arch.basic_block_projection %x out_ch = 128 momentum = 2.0 : tensor<?x8x8x64xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.basic_block_projection' op expected momentum in [0, 1], got 2.0

// -----

%x = "test.op"() : () -> tensor<?x8x8x24xf32>
%c = arch.inv_residual_identity %x expand_ch = 144 out_ch = 32 : tensor<?x8x8x24xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.inv_residual_identity' op expected input C = 32 (identity shortcut), got C = 24

// -----

%x = "test.op"() : () -> tensor<?x8x8x24xf32>
%c = arch.inv_residual_no_shortcut %x expand_ch = 0 out_ch = 32 : tensor<?x8x8x24xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.inv_residual_no_shortcut' op expected expand_ch > 0, got 0

// ---- tree form: arch.block, arch.seq, arch.repeat, arch.add2, arch.yield ----

// -----

%x = "test.op"() : () -> tensor<?x8x8x16xf32>
%b = arch.block %x resnet_3_3 out_ch = 0 : tensor<?x8x8x16xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.block' op expected out_ch > 0, got 0

// -----

%x = "test.op"() : () -> tensor<?x8x8x16xf32>
%b = arch.block %x resnet_1_3_1_ds out_ch = 64 : tensor<?x8x8x16xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.block' op expected mid_ch for style resnet_1_3_1_ds

// -----

%x = "test.op"() : () -> tensor<?x8x8x16xf32>
%b = arch.block %x resnet_1_3_1 mid_ch = 0 out_ch = 64 : tensor<?x8x8x16xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.block' op expected mid_ch > 0, got 0

// -----

%x = "test.op"() : () -> tensor<?x8x8x16xf32>
%b = arch.block %x mb_e6_k3 mid_ch = 8 out_ch = 16 : tensor<?x8x8x16xf32> -> tensor<?x?x?x?xf32>
// CHECK: 'arch.block' op expected no mid_ch for style mb_e6_k3 (only the resnet_1_3_1 styles take one)

// -----

%x = "test.op"() : () -> tensor<?x8x8x16xf32>
%b = arch.block %x resnet_3_3_ds out_ch = 32 : tensor<?x8x8x16xf32> -> tensor<?x8x8x32xf32>
// CHECK: 'arch.block' op result type tensor<?x8x8x32xf32> does not match the deduced shape tensor<?x4x4x32xf32> for input tensor<?x8x8x16xf32>

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%s = arch.seq %x : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32> {
^bb0(%a: tensor<?x8x8x3xf32>, %b: tensor<?x8x8x3xf32>):
  arch.yield %a : tensor<?x8x8x3xf32>
}
// CHECK: 'arch.seq' op expected the body region to take exactly one argument, got 2

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%s = arch.seq %x : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32> {
  arch.yield %x : tensor<?x8x8x3xf32>
}
// CHECK: 'arch.seq' op expected the body region to take exactly one argument, got 0

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%s = arch.seq %x : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32> {
^bb0(%a: tensor<?x8x8x3xf32>):
  "test.termop"(%a) : (tensor<?x8x8x3xf32>) -> ()
}
// CHECK: 'arch.seq' op expected the body region to end in 'arch.yield'

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf16>
%s = arch.seq %x : tensor<?x8x8x3xf16> -> tensor<?x?x?x?xf32> {
^bb0(%a: tensor<?x8x8x3xf16>):
  arch.yield %a : tensor<?x8x8x3xf16>
}
// CHECK: 'arch.seq' op expected input element type f32 (AMP is a model attribute, not an element type), got f16

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%s = arch.seq %x : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32> {
}
// CHECK: Region 'body' at position 0 expected a single block, but got 0 blocks

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%r = arch.repeat %x times = 0 : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32> {
^bb0(%a: tensor<?x8x8x3xf32>):
  arch.yield %a : tensor<?x8x8x3xf32>
}
// CHECK: 'arch.repeat' op expected times >= 1, got 0

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%r = arch.add2 %x : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32> shortcut {
^bb0(%s: tensor<8x3xf32>):
  %t = "test.op"() : () -> tensor<?x8x8x3xf32>
  arch.yield %t : tensor<?x8x8x3xf32>
} main {
^bb0(%m: tensor<?x8x8x3xf32>):
  arch.yield %m : tensor<?x8x8x3xf32>
}
// CHECK: 'arch.add2' op expected shortcut region argument to be a rank-4 NHWC tensor, got tensor<8x3xf32>

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
%r = arch.add2 %x : tensor<?x8x8x3xf32> -> tensor<?x?x?x?xf32> shortcut {
^bb0(%s: tensor<?x8x8x3xf32>):
  arch.yield %s : tensor<?x8x8x3xf32>
} main {
^bb0(%m: tensor<?x8x8x3xf32>):
  "test.termop"() : () -> ()
}
// CHECK: 'arch.add2' op expected the main region to end in 'arch.yield'

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
arch.yield %x : tensor<?x8x8x3xf32>
// CHECK: 'arch.yield' expects parent op to be one of 'arch.seq', 'arch.repeat', 'arch.add2'

// ---- arch.model, arch.output ----

// -----

arch.model @m input(0, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x?x8x3xf32>):
  arch.output %x : tensor<?x?x8x3xf32>
}
// CHECK: 'arch.model' op expected input_h > 0, got 0

// -----

arch.model @m input(8, 8, 3) num_classes = 0 {
^bb0(%x: tensor<?x8x8x3xf32>):
  arch.output %x : tensor<?x8x8x3xf32>
}
// CHECK: 'arch.model' op expected num_classes > 0, got 0

// -----

arch.model @m input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>, %y: tensor<?x8x8x3xf32>):
  arch.output %x : tensor<?x8x8x3xf32>
}
// CHECK: 'arch.model' op expected the body to take exactly one argument (the input), got 2

// -----

arch.model @m input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<8x8x3xf32>):
  %r = arch.relu %x : tensor<8x8x3xf32> -> tensor<?x8x8x3xf32>
  arch.output %r : tensor<?x8x8x3xf32>
}
// CHECK: 'arch.relu' op expected input to be a rank-4 NHWC tensor, got tensor<8x8x3xf32>

// -----

arch.model @m input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<8x8x3xf32>):
  %r = "test.op"() : () -> tensor<?x8x8x3xf32>
  arch.output %r : tensor<?x8x8x3xf32>
}
// CHECK: 'arch.model' op expected input argument to be a rank-4 NHWC tensor, got tensor<8x8x3xf32>

// -----

arch.model @m input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x4xf32>):
  arch.output %x : tensor<?x8x8x4xf32>
}
// CHECK: 'arch.model' op input argument type tensor<?x8x8x4xf32> does not match input_c = 3

// -----

arch.model @m input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  "test.termop"(%x) : (tensor<?x8x8x3xf32>) -> ()
}
// CHECK: 'arch.model' op expected the body to end in 'arch.output'

// -----

arch.model @m input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %r = arch.relu %x : tensor<?x8x8x3xf32> -> tensor<?x8x8x3xf32>
}
// CHECK: Operation arch.relu terminates block in single-block region but is not a terminator

// -----

arch.model @m input(8, 8, 3) num_classes = 10 first_layer = 2 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %r = arch.relu %x : tensor<?x8x8x3xf32> -> tensor<?x8x8x3xf32>
  %s = arch.relu %r : tensor<?x8x8x3xf32> -> tensor<?x8x8x3xf32>
  arch.output %s : tensor<?x8x8x3xf32>
}
// CHECK: 'arch.model' op expected first_layer in [0, 2), got 2

// -----

arch.model @m input(8, 8, 3) num_classes = 10 first_layer = -1 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %r = arch.relu %x : tensor<?x8x8x3xf32> -> tensor<?x8x8x3xf32>
  arch.output %r : tensor<?x8x8x3xf32>
}
// CHECK: 'arch.model' op expected first_layer in [0, 1), got -1

// -----

%x = "test.op"() : () -> tensor<?x8x8x3xf32>
arch.output %x : tensor<?x8x8x3xf32>
// CHECK: 'arch.output' expects parent op 'arch.model'

// -----

// A valid last chunk: the run must reach it and print it.
// CHECK: arch.model @valid input(8, 8, 3) num_classes = 10 {
arch.model @valid input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  arch.output %x : tensor<?x8x8x3xf32>
}
