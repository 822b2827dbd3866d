"""Which model ``tr-train`` trains and which input it gets: model sources and the geometry rule.

:class:`ModelSource` is a zoo model (:func:`zoo_source`) or a BluePrint file
(:func:`blueprint_source`); :func:`plan_input` decides how a dataset's images are brought to the
model's input (the *Geometry* paragraph of :mod:`tr_mlir.tools.tr_train`), :func:`input_table`
which zoo model takes which dataset (``docs/tr-train.md``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tr_mlir.pyfile import PythonFileError, import_spec, takes_arguments, user_frame
from tr_mlir.tools.train_options import TrainError

# --------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSource:
    """Where the network comes from: a zoo name or ``FILE.py:FUNC``.

    ``native``: the model's own input shape (the zoo's, or the BluePrint's returned shape;
    None: take the dataset's); ``native_classes``: the zoo's class count (synthetic data);
    ``build(num_classes)`` returns the BluePrint layer.
    """

    label: str
    description: str
    native: tuple[int, int, int] | None
    native_classes: int
    build: Callable[[int], Any]
    explicit_shape: bool = False  # a BluePrint that named its input: channels must match
    build_for: Callable[[int, tuple[int, int, int]], Any] | None = None  # --torch-model: (classes, shape) -> TorchModel


def zoo_source(name: str) -> ModelSource:
    """The zoo model ``name``; :class:`TrainError` (with the known names) when unknown."""
    from tr_mlir.zoo import MODELS

    spec = MODELS.get(name)
    if spec is None:
        raise TrainError(f"unknown model '{name}'; zoo models: {', '.join(MODELS)} "
                         "(or pass --blueprint FILE.py:FUNC)")
    return ModelSource(name, f"zoo: {spec.description}", tuple(spec.input_shape), spec.num_classes,
                       spec.blueprint)


def blueprint_source(spec: str) -> ModelSource:
    """Import ``FILE.py:FUNC`` (module doc); :class:`TrainError` for a missing or broken file, a
    missing or non-callable FUNC, or a call that fails or returns something else than a layer
    or ``(layer, (H, W, C))``."""
    from tr_mlir.blueprint import Layer

    try:
        path, module, func_name = import_spec(spec, "_tr_train_blueprint_", "FUNC")
    except PythonFileError as e:
        raise TrainError(f"--blueprint: {e}") from None
    module_name = module.__name__
    func = getattr(module, func_name, None)
    if func is None:
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                       and getattr(v, "__module__", None) == module_name)
        raise TrainError(f"--blueprint: {path} defines no '{func_name}'"
                         + (f"; its functions: {', '.join(names)}" if names else ""))
    if not callable(func):
        raise TrainError(f"--blueprint: '{func_name}' in {path} is not a function, got {type(func).__name__}")
    takes_classes = takes_arguments(func, unknown=True)

    def call(num_classes: int) -> Any:
        try:
            return func(num_classes) if takes_classes else func()
        except (Exception, SystemExit) as e:  # sys.exit() in FUNC must not end tr-train silently
            raise TrainError(f"--blueprint: {func_name}({num_classes if takes_classes else ''}) failed: "
                             f"{user_frame(e, path)}{type(e).__name__}: {e}") from None

    def split(result: Any) -> tuple[Any, tuple[int, int, int] | None]:
        if isinstance(result, Layer):
            return result, None
        if (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], Layer)
                and isinstance(result[1], (tuple, list)) and len(result[1]) == 3
                and all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in result[1])):
            return result[0], tuple(result[1])
        raise TrainError(f"--blueprint: {func_name} must return a BluePrint layer or (layer, (H, W, C)) "
                         f"with positive ints, got {result!r:.200}")

    # The shape is a property of the function: ask it once with the default class count.
    _, native = split(call(10))
    return ModelSource(f"{path}:{func_name}", f"blueprint {func_name} from {path}", native, 10,
                       lambda n: split(call(n))[0], explicit_shape=native is not None)


# --------------------------------------------------------------------------------------
# Geometry: which input a model gets from a dataset
# --------------------------------------------------------------------------------------


def has_spatial_reader(model: Any) -> bool:
    """Whether a layer of the flat ``arch.model`` other than its first, with the
    :class:`~tr_mlir.dialects.arch.ReadsSpatialMap` trait (fc, flatten: their weights depend on
    the H x W they read), reads an H x W > 1 map."""
    from tr_mlir.dialects.arch import ReadsSpatialMap, static_hwc

    for i, op in enumerate(model.layers()):
        if i > 0 and op.has_trait(ReadsSpatialMap):
            hwc = static_hwc(op.operands[0].type)
            if hwc is not None and hwc[0] * hwc[1] > 1:
                return True
    return False


@functools.lru_cache(maxsize=64)
def reads_fixed_map(layer: Any, shape: tuple[int, int, int], num_classes: int) -> bool:
    """Whether the model, planned (fused) at ``shape``, has a Flatten or FC layer other than its
    first that reads an H x W > 1 map (its classifier then needs that input size: LeNet-5, VGG).
    A fused ``gap_fc`` averages its map first, so it is not such a layer."""
    from tr_mlir.compile import arch_plan
    from tr_mlir.dialects.arch import ModelOp

    try:
        module = arch_plan(layer, shape, amp=False, fuse=True, num_classes=num_classes)
    except Exception:  # a model that does not plan at its own shape has no size to keep
        return False
    return has_spatial_reader(next(op for op in module.walk() if isinstance(op, ModelOp)))


@dataclass(frozen=True)
class InputPlan:
    """How a dataset reaches a model: ``mode`` None (as is), ``"pad"`` or ``"resize"`` to
    ``to`` = (H, W); ``reason`` in words."""

    mode: str | None
    to: tuple[int, int] | None
    reason: str


def _pad_or_resize(src: tuple[int, int], dst: tuple[int, int]) -> str:
    """``pad`` when ``dst`` is at least ``src`` and less than twice it in both dims, else ``resize``."""
    if all(s <= d < 2 * s for s, d in zip(src, dst)):
        return "pad"
    return "resize"


def plan_input(source: ModelSource, layer: Any, data_shape: tuple[int, int, int], num_classes: int) -> InputPlan:
    """The geometry rule of the module doc for ``layer`` (from ``source``) and a dataset of
    ``data_shape`` (H, W, C); :class:`TrainError` when a BluePrint's channels differ."""
    h, w, c = data_shape
    native = source.native
    if native is None:
        return InputPlan(None, None, "the model takes the dataset's shape")
    if source.explicit_shape and native[2] != c:
        raise TrainError(f"{source.label} reads {native[2]} channel(s) ({native[0]}x{native[1]}x{native[2]}), "
                         f"but the dataset has {c}")
    if (native[0], native[1]) == (h, w):
        return InputPlan(None, None, "the dataset has the model's input size")
    if not source.explicit_shape and not reads_fixed_map(layer, (native[0], native[1], c), num_classes):
        return InputPlan(None, None, "the model does not depend on the input size")
    mode = _pad_or_resize((h, w), (native[0], native[1]))
    why = "the model's input size" if source.explicit_shape else "its classifier reads a fixed-size map"
    return InputPlan(mode, (native[0], native[1]), why)


def input_table(datasets: dict[str, tuple[int, int, int]] | None = None) -> dict[str, dict[str, str]]:
    """For every zoo model and dataset shape: the input the model trains on, as text
    (``8x8x1``, ``32x32x1 (padded)``, ``32x32x1 (resized)``, or ``no: <reason>``) after
    :func:`plan_input` and an ArchPlan compile. ``datasets``: name -> (H, W, C) (default: digits,
    mnist, cifar10). The table of ``docs/tr-train.md``."""
    from tr_mlir.compile import arch_plan
    from tr_mlir.zoo import MODELS

    datasets = datasets or {"digits": (8, 8, 1), "mnist": (28, 28, 1), "cifar10": (32, 32, 3)}
    out: dict[str, dict[str, str]] = {}
    for name in MODELS:
        src = zoo_source(name)
        row = {}
        for ds, shape in datasets.items():
            layer = src.build(10)
            plan = plan_input(src, layer, shape, 10)
            hw = plan.to or shape[:2]
            final = (hw[0], hw[1], shape[2])
            try:
                arch_plan(layer, final, amp=False, fuse=True, num_classes=10)
            except Exception as e:
                row[ds] = "no: " + str(e).splitlines()[0]
                continue
            tag = {None: "", "pad": " (padded)", "resize": " (resized)"}[plan.mode]
            row[ds] = f"{final[0]}x{final[1]}x{final[2]}{tag}"
        out[name] = row
    return out
