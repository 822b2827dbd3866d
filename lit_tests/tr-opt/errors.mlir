// tr-opt's command-line errors: each prints one `tr-opt: error:` line (maybe followed by
// context) on stderr, exits 1 (`not` checks it), and never a Python traceback.
// The IR of this file is a valid model, used by the pipeline RUN lines.

// RUN: echo garbage | not tr-opt 2>&1 | filecheck %s --check-prefix=GARBAGE
// GARBAGE:      tr-opt: error: stdin:1:1: Operation garbage is not registered
// GARBAGE-NEXT: garbage
// GARBAGE-NEXT: ^^^^^^^
// GARBAGE-NOT:  Traceback

// RUN: not tr-opt %S/Inputs/does_not_exist.mlir 2>&1 | filecheck %s --check-prefix=MISSING
// MISSING:     tr-opt: error: could not open input file '{{.*}}does_not_exist.mlir': No such file or directory
// MISSING-NOT: Traceback

// RUN: not tr-opt %s -p cse,nope 2>&1 | filecheck %s --check-prefix=UNKNOWN
// UNKNOWN:     tr-opt: error: invalid pass pipeline: Unrecognized passes: ['nope'] (see tr-opt --help for the passes)
// UNKNOWN-NOT: Traceback

// RUN: not tr-opt %s -p 'arch-expand{fuse=maybe}' 2>&1 | filecheck %s --check-prefix=BADOPT
// BADOPT:     tr-opt: error: invalid pass pipeline: pass 'arch-expand': option 'fuse' expects true or false, got 'maybe'
// BADOPT-NOT: Traceback
// RUN: not tr-opt %s --pass-pipeline='builtin.module(cse, memplan-compile{batch_size=-1.5})' 2>&1 | filecheck %s --check-prefix=BADINT
// BADINT: tr-opt: error: invalid pass pipeline: pass 'memplan-compile': option 'batch_size' expects an integer, got -1.5

// As in mlir-opt, a bool option without a value is true; any other option needs a value.
// RUN: tr-opt %s -p 'arch-expand{fuse}' | filecheck %s --check-prefix=BAREBOOL
// BAREBOOL: arch.model @pipeline input(8, 8, 3) num_classes = 10 fuse {
// RUN: not tr-opt %s -p 'arch-plan{num_classes}' 2>&1 | filecheck %s --check-prefix=BAREINT
// BAREINT: tr-opt: error: invalid pass pipeline: pass 'arch-plan': option 'num_classes' needs a value (num_classes=...)

// RUN: not tr-opt %s -p 'cse{nope=1}' 2>&1 | filecheck %s --check-prefix=NOOPT
// NOOPT:     tr-opt: error: invalid pass pipeline: pass 'cse': Provided arguments ["nope"] not found in expected arguments []
// NOOPT-NOT: Traceback

// RUN: not tr-opt %s -p 'cse{' 2>&1 | filecheck %s --check-prefix=SYNTAX
// SYNTAX:      tr-opt: error: invalid pass pipeline: Expected argument name here (in 'cse{')
// SYNTAX-NEXT: cse{
// SYNTAX-NEXT: ^
// SYNTAX-NOT:  Traceback

// A trailing comma is an empty pass element, in -p as in --pass-pipeline (xDSL ignored it).
// RUN: not tr-opt %s -p 'arch-plan,' 2>&1 | filecheck %s --check-prefix=TRAILING
// TRAILING:      tr-opt: error: invalid pass pipeline: Expected pass name here (in 'arch-plan,')
// TRAILING-NEXT: arch-plan,
// TRAILING-NEXT: {{^          \^$}}
// TRAILING-NOT:  Traceback
// RUN: not tr-opt %s -p 'cse,arch-expand{fuse=true},' 2>&1 | filecheck %s --check-prefix=TRAILING-OPT
// TRAILING-OPT: tr-opt: error: invalid pass pipeline: Expected pass name here (in 'cse,arch-expand{fuse=true},')
// RUN: not tr-opt %s --pass-pipeline='builtin.module(arch-plan,)' 2>&1 | filecheck %s --check-prefix=TRAILING-PP
// TRAILING-PP: tr-opt: error: invalid pass pipeline: empty pass name in pipeline 'builtin.module(arch-plan,)'

// RUN: not tr-opt %s --pass-pipeline='builtin.module(cse' 2>&1 | filecheck %s --check-prefix=UNCLOSED
// UNCLOSED:     tr-opt: error: invalid pass pipeline: missing ')' closing 'builtin.module(' in 'builtin.module(cse'
// UNCLOSED-NOT: Traceback

// RUN: not tr-opt %s --pass-pipeline='builtin.module(func.func(cse))' 2>&1 | filecheck %s --check-prefix=NESTED
// NESTED:     tr-opt: error: invalid pass pipeline: nested pass pipelines (e.g. 'func.func(...)') are not supported: tr-opt runs every pass on the whole module, so list the passes directly in 'builtin.module(...)'; got 'builtin.module(func.func(cse))'
// NESTED-NOT: Traceback

// RUN: not tr-opt %s --pass-pipeline='cse' 2>&1 | filecheck %s --check-prefix=ANCHOR
// ANCHOR: tr-opt: error: invalid pass pipeline: expected a pipeline anchored on 'builtin.module(...)', got 'cse'

// RUN: not tr-opt %s -p cse --pass-pipeline='builtin.module(cse)' 2>&1 | filecheck %s --check-prefix=BOTH
// BOTH: tr-opt: error: use either -p/--passes or --pass-pipeline, not both

// RUN: not tr-opt %s -t nope 2>&1 | filecheck %s --check-prefix=TARGET
// TARGET:      tr-opt: error: argument -t/--target: invalid choice: 'nope' (choose from {{.*}}mlir{{.*}}archplan-yaml{{.*}})
// TARGET-NEXT: tr-opt: note: see 'tr-opt --help'
// TARGET-NOT:  Traceback

// RUN: not tr-opt %s --no-such-flag 2>&1 | filecheck %s --check-prefix=FLAG
// FLAG: tr-opt: error: unrecognized arguments: --no-such-flag

// A verifier error: one line naming file:line:col and the op, then the annotated IR.
// RUN: not tr-opt %S/Inputs/conv_stride0.mlir 2>&1 | filecheck %s --check-prefix=VERIFY
// VERIFY:      tr-opt: error: {{.*}}conv_stride0.mlir:4:8: 'arch.conv' op expected s >= 1, got 0
// VERIFY-NEXT: "builtin.module"() ({
// VERIFY:      | Operation does not verify: 'arch.conv' op expected s >= 1, got 0
// VERIFY-NOT:  Traceback
// ... and --verify-diagnostics keeps xDSL's behaviour: the message on stdout, exit 0.
// RUN: tr-opt %S/Inputs/conv_stride0.mlir --verify-diagnostics | filecheck %s --check-prefix=VERIFY-DIAG
// VERIFY-DIAG:     'arch.conv' op expected s >= 1, got 0
// VERIFY-DIAG-NOT: tr-opt: error

// A pass failure at a parsed op names its file:line:col.
// RUN: not tr-opt %S/Inputs/tree_form.mlir -p arch-deduce-shapes 2>&1 | filecheck %s --check-prefix=PASSLOC
// PASSLOC:      tr-opt: error: {{.*}}tree_form.mlir:4:8: 'arch.seq' op is tree form, but arch-deduce-shapes needs the flat graph; run arch-expand first
// PASSLOC-NEXT: tr-opt: note: in pass 'arch-deduce-shapes'
// PASSLOC-NOT:  Traceback

// An input that ends inside a region: the missing '}' and where the region opens.
// RUN: not tr-opt %S/Inputs/unclosed_region.mlir 2>&1 | filecheck %s --check-prefix=REGION-EOF
// REGION-EOF:      tr-opt: error: {{.*}}unclosed_region.mlir:6:1: expected '}' closing the region of 'arch.model', got the end of the input
// REGION-EOF:      the region opens here:
// REGION-EOF-NEXT: {{.*}}unclosed_region.mlir:2:47
// REGION-EOF-NOT:  Traceback

// xDSL 0.74 holes (DESIGN section 6), each a diagnostic.
// RUN: not tr-opt %S/Inputs/int_width.mlir 2>&1 | filecheck %s --check-prefix=WIDTH
// WIDTH:      tr-opt: error: {{.*}}int_width.mlir:3:22: integer bitwidth is limited to 16777215 bits, got i99999999999
// WIDTH-NEXT: "test.op"() {a = 1 : i99999999999} : () -> ()
// WIDTH-NEXT: ^^^^^^^^^^^^
// RUN: not tr-opt %S/Inputs/deep_nesting.mlir 2>&1 | filecheck %s --check-prefix=DEEP
// DEEP:     tr-opt: error: {{.*}}deep_nesting.mlir:131:67: regions nested more than 64 levels deep are not supported
// DEEP-NOT: Traceback
// RUN: not tr-opt %S/Inputs/float_overflow.mlir 2>&1 | filecheck %s --check-prefix=FLOAT
// FLOAT:      tr-opt: error: {{.*}}float_overflow.mlir:2:18: numeric literal out of range for its type: '1.0e39 : f32'
// FLOAT-NOT:  Traceback
// RUN: not tr-opt %S/Inputs/unterminated_string.mlir 2>&1 | filecheck %s --check-prefix=STRING
// STRING: tr-opt: error: {{.*}}unterminated_string.mlir:3:23: End of file reached before closing string literal.
// RUN: not tr-opt %S/Inputs/use_before_def.mlir 2>&1 | filecheck %s --check-prefix=DOMINANCE
// DOMINANCE:      tr-opt: error: {{.*}}use_before_def.mlir:4:8: 'arch.relu' op operand #0 does not dominate this use: %c is defined later in the same block (by 'arch.conv')
// DOMINANCE-NEXT: "builtin.module"() ({
// DOMINANCE-NOT:  Traceback
// ... also with --parsing-diagnostics / --verify-diagnostics, which report and exit 0:
// RUN: tr-opt %S/Inputs/int_width.mlir --parsing-diagnostics | filecheck %s --check-prefix=WIDTH-DIAG
// WIDTH-DIAG: integer bitwidth is limited to 16777215 bits, got i99999999999
// RUN: tr-opt %S/Inputs/use_before_def.mlir --verify-diagnostics | filecheck %s --check-prefix=DOMINANCE-DIAG
// DOMINANCE-DIAG: 'arch.relu' op operand #0 does not dominate this use

// -p and --pass-pipeline (spaces after commas allowed) give identical output.
// RUN: tr-opt %s -p 'cse,canonicalize,dce' -o %t.p.mlir
// RUN: tr-opt %s --pass-pipeline='builtin.module(cse, canonicalize,  dce)' -o %t.pp.mlir
// RUN: diff %t.p.mlir %t.pp.mlir
// RUN: filecheck %s --check-prefix=PIPELINE --input-file=%t.pp.mlir
// PIPELINE:      arch.model @pipeline input(8, 8, 3) num_classes = 10 {
// PIPELINE-NEXT: ^bb0(%[[X:.*]]: tensor<?x8x8x3xf32>):
// PIPELINE-NEXT:   %[[R:.*]] = arch.relu %[[X]] : tensor<?x8x8x3xf32> -> tensor<?x8x8x3xf32>
// PIPELINE-NEXT:   arch.output %[[R]] : tensor<?x8x8x3xf32>
// An empty pipeline runs no pass (the unused %dup stays).
// RUN: tr-opt %s --pass-pipeline='builtin.module()' | filecheck %s --check-prefix=EMPTY
// EMPTY: %dup = arch.relu

arch.model @pipeline input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %r = arch.relu %x : tensor<?x8x8x3xf32> -> tensor<?x8x8x3xf32>
  %dup = arch.relu %x : tensor<?x8x8x3xf32> -> tensor<?x8x8x3xf32>
  arch.output %r : tensor<?x8x8x3xf32>
}
