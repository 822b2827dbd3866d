// 70 nested regions (arch.model + 69 arch.seq): more than tr-opt's limit of 64.
// Without the limit xDSL's recursive-descent parser raises RecursionError near 85.
arch.model @deep input(8, 8, 4) num_classes = 10 {
^bb0(%in: tensor<?x8x8x4xf32>):
%s0 = arch.seq %in : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a0: tensor<?x8x8x4xf32>):
%s1 = arch.seq %a0 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a1: tensor<?x8x8x4xf32>):
%s2 = arch.seq %a1 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a2: tensor<?x8x8x4xf32>):
%s3 = arch.seq %a2 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a3: tensor<?x8x8x4xf32>):
%s4 = arch.seq %a3 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a4: tensor<?x8x8x4xf32>):
%s5 = arch.seq %a4 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a5: tensor<?x8x8x4xf32>):
%s6 = arch.seq %a5 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a6: tensor<?x8x8x4xf32>):
%s7 = arch.seq %a6 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a7: tensor<?x8x8x4xf32>):
%s8 = arch.seq %a7 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a8: tensor<?x8x8x4xf32>):
%s9 = arch.seq %a8 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a9: tensor<?x8x8x4xf32>):
%s10 = arch.seq %a9 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a10: tensor<?x8x8x4xf32>):
%s11 = arch.seq %a10 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a11: tensor<?x8x8x4xf32>):
%s12 = arch.seq %a11 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a12: tensor<?x8x8x4xf32>):
%s13 = arch.seq %a12 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a13: tensor<?x8x8x4xf32>):
%s14 = arch.seq %a13 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a14: tensor<?x8x8x4xf32>):
%s15 = arch.seq %a14 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a15: tensor<?x8x8x4xf32>):
%s16 = arch.seq %a15 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a16: tensor<?x8x8x4xf32>):
%s17 = arch.seq %a16 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a17: tensor<?x8x8x4xf32>):
%s18 = arch.seq %a17 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a18: tensor<?x8x8x4xf32>):
%s19 = arch.seq %a18 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a19: tensor<?x8x8x4xf32>):
%s20 = arch.seq %a19 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a20: tensor<?x8x8x4xf32>):
%s21 = arch.seq %a20 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a21: tensor<?x8x8x4xf32>):
%s22 = arch.seq %a21 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a22: tensor<?x8x8x4xf32>):
%s23 = arch.seq %a22 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a23: tensor<?x8x8x4xf32>):
%s24 = arch.seq %a23 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a24: tensor<?x8x8x4xf32>):
%s25 = arch.seq %a24 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a25: tensor<?x8x8x4xf32>):
%s26 = arch.seq %a25 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a26: tensor<?x8x8x4xf32>):
%s27 = arch.seq %a26 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a27: tensor<?x8x8x4xf32>):
%s28 = arch.seq %a27 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a28: tensor<?x8x8x4xf32>):
%s29 = arch.seq %a28 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a29: tensor<?x8x8x4xf32>):
%s30 = arch.seq %a29 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a30: tensor<?x8x8x4xf32>):
%s31 = arch.seq %a30 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a31: tensor<?x8x8x4xf32>):
%s32 = arch.seq %a31 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a32: tensor<?x8x8x4xf32>):
%s33 = arch.seq %a32 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a33: tensor<?x8x8x4xf32>):
%s34 = arch.seq %a33 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a34: tensor<?x8x8x4xf32>):
%s35 = arch.seq %a34 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a35: tensor<?x8x8x4xf32>):
%s36 = arch.seq %a35 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a36: tensor<?x8x8x4xf32>):
%s37 = arch.seq %a36 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a37: tensor<?x8x8x4xf32>):
%s38 = arch.seq %a37 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a38: tensor<?x8x8x4xf32>):
%s39 = arch.seq %a38 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a39: tensor<?x8x8x4xf32>):
%s40 = arch.seq %a39 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a40: tensor<?x8x8x4xf32>):
%s41 = arch.seq %a40 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a41: tensor<?x8x8x4xf32>):
%s42 = arch.seq %a41 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a42: tensor<?x8x8x4xf32>):
%s43 = arch.seq %a42 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a43: tensor<?x8x8x4xf32>):
%s44 = arch.seq %a43 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a44: tensor<?x8x8x4xf32>):
%s45 = arch.seq %a44 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a45: tensor<?x8x8x4xf32>):
%s46 = arch.seq %a45 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a46: tensor<?x8x8x4xf32>):
%s47 = arch.seq %a46 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a47: tensor<?x8x8x4xf32>):
%s48 = arch.seq %a47 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a48: tensor<?x8x8x4xf32>):
%s49 = arch.seq %a48 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a49: tensor<?x8x8x4xf32>):
%s50 = arch.seq %a49 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a50: tensor<?x8x8x4xf32>):
%s51 = arch.seq %a50 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a51: tensor<?x8x8x4xf32>):
%s52 = arch.seq %a51 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a52: tensor<?x8x8x4xf32>):
%s53 = arch.seq %a52 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a53: tensor<?x8x8x4xf32>):
%s54 = arch.seq %a53 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a54: tensor<?x8x8x4xf32>):
%s55 = arch.seq %a54 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a55: tensor<?x8x8x4xf32>):
%s56 = arch.seq %a55 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a56: tensor<?x8x8x4xf32>):
%s57 = arch.seq %a56 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a57: tensor<?x8x8x4xf32>):
%s58 = arch.seq %a57 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a58: tensor<?x8x8x4xf32>):
%s59 = arch.seq %a58 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a59: tensor<?x8x8x4xf32>):
%s60 = arch.seq %a59 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a60: tensor<?x8x8x4xf32>):
%s61 = arch.seq %a60 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a61: tensor<?x8x8x4xf32>):
%s62 = arch.seq %a61 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a62: tensor<?x8x8x4xf32>):
%s63 = arch.seq %a62 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a63: tensor<?x8x8x4xf32>):
%s64 = arch.seq %a63 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a64: tensor<?x8x8x4xf32>):
%s65 = arch.seq %a64 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a65: tensor<?x8x8x4xf32>):
%s66 = arch.seq %a65 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a66: tensor<?x8x8x4xf32>):
%s67 = arch.seq %a66 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a67: tensor<?x8x8x4xf32>):
%s68 = arch.seq %a67 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32> {
^bb0(%a68: tensor<?x8x8x4xf32>):
%r = arch.relu %a68 : tensor<?x8x8x4xf32> -> tensor<?x8x8x4xf32>
arch.yield %r : tensor<?x8x8x4xf32>
}
arch.yield %s68 : tensor<?x8x8x4xf32>
}
arch.yield %s67 : tensor<?x8x8x4xf32>
}
arch.yield %s66 : tensor<?x8x8x4xf32>
}
arch.yield %s65 : tensor<?x8x8x4xf32>
}
arch.yield %s64 : tensor<?x8x8x4xf32>
}
arch.yield %s63 : tensor<?x8x8x4xf32>
}
arch.yield %s62 : tensor<?x8x8x4xf32>
}
arch.yield %s61 : tensor<?x8x8x4xf32>
}
arch.yield %s60 : tensor<?x8x8x4xf32>
}
arch.yield %s59 : tensor<?x8x8x4xf32>
}
arch.yield %s58 : tensor<?x8x8x4xf32>
}
arch.yield %s57 : tensor<?x8x8x4xf32>
}
arch.yield %s56 : tensor<?x8x8x4xf32>
}
arch.yield %s55 : tensor<?x8x8x4xf32>
}
arch.yield %s54 : tensor<?x8x8x4xf32>
}
arch.yield %s53 : tensor<?x8x8x4xf32>
}
arch.yield %s52 : tensor<?x8x8x4xf32>
}
arch.yield %s51 : tensor<?x8x8x4xf32>
}
arch.yield %s50 : tensor<?x8x8x4xf32>
}
arch.yield %s49 : tensor<?x8x8x4xf32>
}
arch.yield %s48 : tensor<?x8x8x4xf32>
}
arch.yield %s47 : tensor<?x8x8x4xf32>
}
arch.yield %s46 : tensor<?x8x8x4xf32>
}
arch.yield %s45 : tensor<?x8x8x4xf32>
}
arch.yield %s44 : tensor<?x8x8x4xf32>
}
arch.yield %s43 : tensor<?x8x8x4xf32>
}
arch.yield %s42 : tensor<?x8x8x4xf32>
}
arch.yield %s41 : tensor<?x8x8x4xf32>
}
arch.yield %s40 : tensor<?x8x8x4xf32>
}
arch.yield %s39 : tensor<?x8x8x4xf32>
}
arch.yield %s38 : tensor<?x8x8x4xf32>
}
arch.yield %s37 : tensor<?x8x8x4xf32>
}
arch.yield %s36 : tensor<?x8x8x4xf32>
}
arch.yield %s35 : tensor<?x8x8x4xf32>
}
arch.yield %s34 : tensor<?x8x8x4xf32>
}
arch.yield %s33 : tensor<?x8x8x4xf32>
}
arch.yield %s32 : tensor<?x8x8x4xf32>
}
arch.yield %s31 : tensor<?x8x8x4xf32>
}
arch.yield %s30 : tensor<?x8x8x4xf32>
}
arch.yield %s29 : tensor<?x8x8x4xf32>
}
arch.yield %s28 : tensor<?x8x8x4xf32>
}
arch.yield %s27 : tensor<?x8x8x4xf32>
}
arch.yield %s26 : tensor<?x8x8x4xf32>
}
arch.yield %s25 : tensor<?x8x8x4xf32>
}
arch.yield %s24 : tensor<?x8x8x4xf32>
}
arch.yield %s23 : tensor<?x8x8x4xf32>
}
arch.yield %s22 : tensor<?x8x8x4xf32>
}
arch.yield %s21 : tensor<?x8x8x4xf32>
}
arch.yield %s20 : tensor<?x8x8x4xf32>
}
arch.yield %s19 : tensor<?x8x8x4xf32>
}
arch.yield %s18 : tensor<?x8x8x4xf32>
}
arch.yield %s17 : tensor<?x8x8x4xf32>
}
arch.yield %s16 : tensor<?x8x8x4xf32>
}
arch.yield %s15 : tensor<?x8x8x4xf32>
}
arch.yield %s14 : tensor<?x8x8x4xf32>
}
arch.yield %s13 : tensor<?x8x8x4xf32>
}
arch.yield %s12 : tensor<?x8x8x4xf32>
}
arch.yield %s11 : tensor<?x8x8x4xf32>
}
arch.yield %s10 : tensor<?x8x8x4xf32>
}
arch.yield %s9 : tensor<?x8x8x4xf32>
}
arch.yield %s8 : tensor<?x8x8x4xf32>
}
arch.yield %s7 : tensor<?x8x8x4xf32>
}
arch.yield %s6 : tensor<?x8x8x4xf32>
}
arch.yield %s5 : tensor<?x8x8x4xf32>
}
arch.yield %s4 : tensor<?x8x8x4xf32>
}
arch.yield %s3 : tensor<?x8x8x4xf32>
}
arch.yield %s2 : tensor<?x8x8x4xf32>
}
arch.yield %s1 : tensor<?x8x8x4xf32>
}
arch.output %s0 : tensor<?x8x8x4xf32>
}
