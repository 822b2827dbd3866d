"""Convention tests of the code base (issue 14's "files split at their seams" item).

* No module of the package imports a private name (``_x``) of another module, nor a private
  module of another package: private helpers (``lowering/cpu/_util.py``) are used inside their
  own package (``lowering/cpu/``) only. The exceptions are :data:`PRIVATE_IMPORTS`, each with its
  reason; an entry that no longer occurs fails too, so the list only shrinks.
* A soft size cap: no source file of the package is over :data:`MAX_LINES` lines, except those
  of :data:`OVERSIZED`, each capped at its size when it was listed (split them, then lower or
  drop the entry).
* Every class named ``*Error`` of the package derives from :class:`tr_mlir.errors.TrMlirError`
  (the root of the errors that report a user's mistake), except :data:`NOT_ROOTED`: errors that
  signal a bug of tr-mlir itself, which callers must be able to tell apart (``errors.py``).
* Every kernel of the CPU registry (:data:`tr_mlir.lowering.cpu.KERNELS`) is bound by a node op
  of some compiled graph (a few small models, fused / unfused, fp32 / AMP, every optimizer), or
  listed in :data:`UNREACHED_KERNELS` with the reason no descriptor emits it today.
* Every ``xfail`` of ``tests/`` is ``strict=True``: an expected failure that starts passing says so.
* Layering: no module of ``dialects/`` or ``passes/`` imports ``tr_mlir.lowering`` (not even
  inside a function): the compiler knows kernels through the node-op vocabulary
  (:mod:`tr_mlir.dialects.kernels`), which the kernel library fills.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = {"tr_mlir": "tr_mlir", "dialects": "tr_mlir.dialects", "passes": "tr_mlir.passes",
                "lowering": "tr_mlir.lowering"}
"""Source directory -> the package it is installed as (pyproject's ``package-dir``)."""


def _package_modules() -> list[tuple[Path, str, bool]]:
    """(file, module name, is a package ``__init__``) of every Python module of the package."""
    out = []
    for d, pkg in PACKAGE_DIRS.items():
        for path in sorted((REPO / d).rglob("*.py")):
            parts = list(path.relative_to(REPO / d).with_suffix("").parts)
            init = parts[-1] == "__init__"
            if init:
                parts = parts[:-1]
            out.append((path, ".".join([pkg, *parts]), init))
    return out


MODULES = _package_modules()
MODULE_NAMES = {m for _, m, _ in MODULES}


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


# -- private imports ---------------------------------------------------------------------------

PRIVATE_IMPORTS: dict[tuple[str, str], str] = {
    # (importing file, imported module or module.name) -> why it is allowed
    ("tr_mlir/extend.py", "tr_mlir.passes._descriptors"):
        "the public extension API re-exports the descriptor machinery (Descriptor, LayerPlan, "
        "register_descriptor, ...); making passes/_descriptors.py public is a rename of its own",
    ("tr_mlir/extend.py", "tr_mlir.passes._fusion"):
        "the public extension API re-exports the fusion-chain machinery (Chain, FuseChain, ...)",
    ("tr_mlir/export.py", "tr_mlir.passes._descriptors_program"):
        "the exporter reads the layer table of a compiled program (layers()); to become public "
        "with passes/_descriptors_program.py",
    ("tr_mlir/tools/train_options.py", "tr_mlir.lowering.cpu._cc"):
        "tr-train describes the CPU device with the C kernel compiler's state (_cc.describe())",
    ("tr_mlir/augment.py", "tr_mlir.lowering.cpu._cc"):
        "RandomAffine's per-pixel pass is a C kernel generated for the image shape (compiled and "
        "loaded by _cc, NumPy where it is unavailable)",
    ("lowering/cuda/ops.py", "tr_mlir.lowering.cpu._util"):
        "the CUDA backend binds the same array views as the CPU kernels (F32, flat, nhwc, take "
        "of lowering/cpu/_util.py)",
    ("lowering/cuda/impls.py", "tr_mlir.lowering.cpu._util"): "as lowering/cuda/ops.py",
    ("lowering/cuda/winograd.py", "tr_mlir.lowering.cpu._util"): "as lowering/cuda/ops.py",
}
"""The private imports that cross a package boundary today, with the reason."""


def _private_imports() -> dict[tuple[str, str], list[str]]:
    """(importing file, private module or module.name) -> 'line: import' of each violation."""
    found: dict[tuple[str, str], list[str]] = {}
    for path, mod, init in MODULES:
        pkg = mod if init else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[:len(pkg.split(".")) - (node.level - 1)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                targets = [(f"{src}.{a.name}" if f"{src}.{a.name}" in MODULE_NAMES else src,
                            None if f"{src}.{a.name}" in MODULE_NAMES else a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names]
            else:
                continue
            for module, name in targets:
                if module.split(".")[0] != "tr_mlir":
                    continue
                parts = module.split(".")
                first = next((i for i, p in enumerate(parts) if _private(p)), None)
                if first is not None:  # a private module: fine inside the package that holds it
                    owner = ".".join(parts[:first])
                    if mod != owner and not mod.startswith(owner + "."):
                        found.setdefault((_rel(path), module), []).append(f"{node.lineno}: {ast.unparse(node)}")
                elif name is not None and _private(name) and module != mod:
                    found.setdefault((_rel(path), f"{module}.{name}"), []).append(
                        f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_private_imports_across_modules():
    found = _private_imports()
    new = {k: v for k, v in found.items() if k not in PRIVATE_IMPORTS}
    assert not new, ("private names imported from another module (make the name public where it is "
                     "genuinely shared, or list it in PRIVATE_IMPORTS with the reason):\n"
                     + "\n".join(f"  {f}: {m}  ({'; '.join(v)})" for (f, m), v in sorted(new.items())))
    stale = sorted(set(PRIVATE_IMPORTS) - set(found))
    assert not stale, f"PRIVATE_IMPORTS entries that no longer occur (drop them): {stale}"


# -- layering ----------------------------------------------------------------------------------

COMPILER_PACKAGES = ("tr_mlir.dialects", "tr_mlir.passes")
"""Packages that must not import the lowering (the backends depend on them, not the reverse)."""


def test_the_compiler_does_not_import_the_lowering():
    found = []
    for path, mod, _ in MODULES:
        if not mod.startswith(COMPILER_PACKAGES):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            found += [f"{_rel(path)}:{node.lineno}: {ast.unparse(node)}" for n in names
                      if n == "tr_mlir.lowering" or n.startswith("tr_mlir.lowering.")]
    assert not found, ("the compiler imports the lowering (ask tr_mlir.dialects.kernels instead):\n  "
                       + "\n  ".join(found))


# -- size cap ----------------------------------------------------------------------------------

MAX_LINES = 900
"""The soft cap on a source file's length: past it, split the file at its seams."""

OVERSIZED: dict[str, int] = {
    # file -> its size when listed: the cap until it is split (lower it when the file shrinks)
}
"""The files over :data:`MAX_LINES` today, each with its cap."""

SOURCE_SUFFIXES = (".py", ".c", ".cu")


def _source_files() -> list[Path]:
    return sorted(p for d in PACKAGE_DIRS for p in (REPO / d).rglob("*")
                  if p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts)


def test_source_files_stay_under_the_size_cap():
    sizes = {_rel(p): len(p.read_text(encoding="utf-8").splitlines()) for p in _source_files()}
    over = {f: n for f, n in sizes.items() if n > OVERSIZED.get(f, MAX_LINES)}
    assert not over, (f"files over the size cap ({MAX_LINES} lines, or their OVERSIZED entry): {over}; "
                      "split them at their seams")
    stale = sorted(f for f in OVERSIZED if sizes.get(f, 0) <= MAX_LINES)
    assert not stale, f"OVERSIZED entries now under {MAX_LINES} lines or gone (drop them): {stale}"


# -- one root error class ----------------------------------------------------------------------

NOT_ROOTED: dict[str, str] = {
    # module.Class -> why it does not derive from TrMlirError
    "tr_mlir.lowering.cpu._cc.CompileError":
        "the C compiler rejected a generated kernel: a bug of tr-mlir, not the user's",
    "tr_mlir.lowering.cuda.device.CaptureAllocationError":
        "a kernel wrapper allocated during CUDA graph capture: a bug of the backend",
    "tr_mlir.lowering.cuda.emulator.CaptureAllocationError": "as the device's: a bug of the backend",
    "tr_mlir.lowering.cuda.emulator.HostSyncError":
        "host code touched device memory during capture: a bug of the backend",
    "tr_mlir.lowering.cuda.emulator.LaunchError":
        "a launch that does not match its kernel's signature: a bug of the backend",
    "tr_mlir.lowering.cuda.emulator.NvrtcCompileError":
        "NVRTC rejected the kernel sources: a bug of the sources (CI compiles them all)",
}
"""Error classes that stay outside the root, with the reason."""


def _error_classes() -> list[str]:
    out = []
    for path, mod, _ in MODULES:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                out.append(f"{mod}.{node.name}")
    return out


def test_every_error_class_derives_from_the_root():
    from tr_mlir.errors import TrMlirError

    classes = _error_classes()
    assert "tr_mlir.errors.PluginError" in classes
    loose = []
    for qual in classes:
        mod, _, name = qual.rpartition(".")
        cls = getattr(importlib.import_module(mod), name)
        rooted = issubclass(cls, TrMlirError)
        if rooted == (qual in NOT_ROOTED):
            loose.append(f"{qual} ({'listed in NOT_ROOTED but derives from it' if rooted else 'no TrMlirError base'})")
    assert not loose, "error classes and tr_mlir.errors.TrMlirError: " + "; ".join(loose)
    assert not set(NOT_ROOTED) - set(classes), f"NOT_ROOTED entries that are gone: {set(NOT_ROOTED) - set(classes)}"


def test_nested_error_classes_are_none():
    """Error classes are defined at module level (where the test above finds them)."""
    nested = []
    for path, mod, _ in MODULES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(n) for n in tree.body}
        nested += [f"{_rel(path)}:{n.lineno} {n.name}" for n in ast.walk(tree)
                   if isinstance(n, ast.ClassDef) and n.name.endswith("Error") and id(n) not in top]
    assert not nested, nested


# -- every kernel reachable --------------------------------------------------------------------

_INF = "the infer graphs run this layer's _fwd kernel (or nothing): no descriptor emits the _inf op"
_LARS = ("a LARS kernel of the unsplit form: the LARS descriptors emit the per-segment kernels "
         "(lars_update_first / _deep / _fc, range_update_weight_lars_*) instead")
UNREACHED_KERNELS: dict[str, str] = {
    **{f"{a}_inf": _INF for a in ("tanh", "silu", "relu6", "leaky_relu", "hardswish", "elu", "sigmoid", "dropout",
                                  "identity", "flatten", "channel_padding", "gap", "fc")},
    "lars_compute_trust_ratio": _LARS,
    "lars_update": _LARS,
    "lars_nesterov_update": _LARS,
    "range_update_weight_lars": _LARS,
    "range_update_weight_lars_nesterov": _LARS,
    "range_ema_param_update": "EMA of the parameters: no optimizer option emits it yet",
    "range_h2d_copy_dtensor": "the input batches use range_h2d_copy_a / _b; no descriptor emits the per-DTensor copy",
    "range_sema_switch": "a seed range op (the staging semaphore) that the atlas does not emit",
    "range_sum_allreduce": "the data-parallel graphs reduce with range_mean_allreduce / range_bn_stats_allreduce",
    "noop": "NOOP itself: the descriptors emit its aliases (flatten_bwd_first_layer, channel_padding_bwd_first_layer)",
    "grad_acc": "the seed's spelling: the descriptors emit its alias grad_accum",
    "add_bwd_acc": "the accumulating form of add_bwd: no descriptor emits it",
    "axpy_fwd": "a seed element-wise op that no descriptor emits",
    "flatten_bwd": "a deep flatten emits no backward node today (the library model has one); a first-layer "
                   "flatten emits flatten_bwd_first_layer",
    "fc_bwd_first_layer": "fc_bwd's first-layer alias: an fc cannot be a model's first layer (the arch "
                          "verifier allows flatten, conv, channel_padding or cbr)",
}
"""Registered kernels no compiled graph binds today, with the reason (kept: reference
implementations, seed ops, and kernels the next descriptors will use)."""


def _layer_library():
    """A small model that uses every layer of the BluePrint library the zoo models do not."""
    from tr_mlir import blueprint as bp

    return bp.seq(bp.conv(8, 3, 1, 1), bp.bn(), bp.silu(), bp.conv(8, 3, 1, 1), bp.bn(), bp.elu(),
                  bp.avgpool(2, 2, 0), bp.conv(8, 1), bp.leaky_relu(), bp.conv(8, 1), bp.hardswish(),
                  bp.conv(8, 1), bp.sigmoid(), bp.conv(8, 1), bp.tanh_act(), bp.dropout(0.2), bp.channel_padding(),
                  bp.identity(), bp.flatten(), bp.fc(16, True), bp.bn(), bp.relu6(), bp.fc(10, True))


COMPILED = (
    # (zoo model, "library" or "padded_input", input shape (None: the model's), compile options)
    ("mlp_digits", None, {"optimizer": "sgd"}),
    ("resnet_tiny", None, {"fuse": True, "optimizer": "momentum"}),
    ("resnet_tiny", None, {"amp": True, "optimizer": "lars", "world_size": 2}),
    ("depthwise_tiny", None, {"fuse": True, "amp": True, "optimizer": "adamw"}),
    ("depthwise_tiny", None, {"optimizer": "nesterov"}),
    ("lenet5", None, {"fuse": True, "cbrp": True, "optimizer": "lars-nesterov"}),
    ("library", (8, 8, 3), {"amp": True, "optimizer": "adam"}),
    ("padded_input", (8, 8, 3), {}),
    ("padded_input", (8, 8, 3), {"fuse": True}),  # cbr before a GAP: the BN + ReLU epilogue in the mask form
)


@pytest.fixture(scope="module")
def bound_kernels() -> set[str]:
    from tr_mlir.compile import compile as tr_compile
    from tr_mlir.dialects.memplan import GraphId
    from tr_mlir.lowering.cpu import kernel_name
    from tr_mlir.lowering.executable import find_program
    from tr_mlir.zoo import MODELS

    used: set[str] = set()
    for name, shape, options in COMPILED:
        if name == "library":
            model = _layer_library()
        elif name == "padded_input":  # a channel_padding first layer
            from tr_mlir import blueprint as bp

            model = bp.seq(bp.channel_padding(), bp.cbr(8, 3, 1, 1), bp.gap_fc(10, True))
        else:
            model, shape = MODELS[name].blueprint(10), shape or MODELS[name].input_shape
        module = tr_compile(model, shape, num_classes=10, batch_size=4, train_size=8, val_size=6, **options)
        _, program = find_program(module)
        used |= {kernel_name(n.op) for g in program.graphs() for gid in GraphId for n in g.nodes(gid)}
    return used


def test_every_registered_kernel_is_bound_by_a_compiled_graph(bound_kernels):
    from tr_mlir.lowering.cpu import KERNELS

    unreached = sorted(set(KERNELS) - bound_kernels - set(UNREACHED_KERNELS))
    assert not unreached, (f"registered kernels no compiled graph binds: {unreached}; compile a model that "
                           "uses them in COMPILED, or list them in UNREACHED_KERNELS with the reason")
    reached = sorted(set(UNREACHED_KERNELS) & bound_kernels)
    assert not reached, f"UNREACHED_KERNELS entries that a compiled graph now binds (drop them): {reached}"
    gone = sorted(set(UNREACHED_KERNELS) - set(KERNELS))
    assert not gone, f"UNREACHED_KERNELS entries that are no registered kernel: {gone}"
    unknown = sorted(bound_kernels - set(KERNELS))
    assert not unknown, f"node ops without a registered kernel: {unknown}"


# -- strict xfails -----------------------------------------------------------------------------


def _is_xfail(func: ast.expr) -> bool:
    return isinstance(func, ast.Attribute) and func.attr == "xfail"


def test_every_xfail_is_strict():
    loose = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _is_xfail(node.func):
                owner = node.func.value
                if isinstance(owner, ast.Name) and owner.id == "pytest":  # pytest.xfail(...): imperative
                    loose.append(f"{_rel(path)}:{node.lineno} pytest.xfail() (use a strict mark)")
                    continue
                strict = next((k.value for k in node.keywords if k.arg == "strict"), None)
                if not (isinstance(strict, ast.Constant) and strict.value is True):
                    loose.append(f"{_rel(path)}:{node.lineno} xfail without strict=True")
            elif isinstance(node, ast.Attribute) and _is_xfail(node) and id(node) not in calls \
                    and isinstance(node.value, ast.Attribute) and node.value.attr == "mark":
                loose.append(f"{_rel(path)}:{node.lineno} bare @pytest.mark.xfail (not strict)")
    assert not loose, loose
