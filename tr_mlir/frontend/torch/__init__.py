"""Import a PyTorch ``nn.Module`` into the ``arch`` dialect (DESIGN section 9).

::

    from tr_mlir.frontend.torch import from_torch

    imported = from_torch(resnet18(num_classes=10), (32, 32, 3))   # input (H, W, C)
    task = imported.task(batch_size=32, fuse=True)                 # a tr_mlir.Task, weights loaded
    task.fit((x_nhwc, y), epochs=1)
    module.load_state_dict(task.state_dict())                      # trained weights back, NCHW

**Capture.** The module is captured with ``torch.export.export`` (in eval mode, so that batch norm
and dropout appear as single ops; the training flags are restored afterwards); where export cannot
run, with ``torch.fx.symbolic_trace`` plus shape propagation. The captured graph is translated op by
op into a BluePrint tree (:mod:`tr_mlir.blueprint`), whose emission is the ``arch.model`` (tree form)
the normal pipeline takes: a residual join ``a + b`` becomes ``add2(shortcut, main)`` over the two
branches from their fork point (the shorter branch is the shortcut, so ``arch-merge-blocks`` fuses
torchvision's blocks), so the residual structure is exact. Fusion (conv+bn+relu -> ``arch.cbr``,
residual blocks, gap+fc) comes from the normal passes when compiling with ``fuse=True``.

**What maps** (anything else is one :class:`TorchImportError`):

=================================================  =====================================================
PyTorch                                            arch
=================================================  =====================================================
``Conv2d`` (square kernel, equal strides and        ``arch.conv`` (``groups``: dense, grouped, depthwise)
paddings, dilation 1, zeros padding)
``Conv2d(bias=True)`` whose only user is a         ``arch.conv`` + ``arch.bn``; the bias is folded into
``BatchNorm2d``                                    the running mean (exact: train-mode BN removes any
                                                   per-channel constant, so the bias gets no gradient)
``BatchNorm2d`` / ``BatchNorm1d`` (affine,          ``arch.bn`` (``bn2d`` / ``bn1d``)
running statistics, a momentum)
``ReLU``, ``ReLU6`` (``hardtanh(0, 6)``), ``Tanh``,  the activation op
``Sigmoid``, ``SiLU``, ``Hardswish``, ``ELU(1)``,
``LeakyReLU(0.01)``
``MaxPool2d`` / ``AvgPool2d`` (square, no          ``arch.maxpool`` / ``arch.avgpool``
ceil_mode; avg: ``count_include_pad`` or p = 0)
``AdaptiveAvgPool2d(1)``, ``mean((2, 3))``          ``arch.gap``
``AdaptiveAvgPool2d(s)`` dividing the map evenly   ``arch.avgpool(k, k, 0)``; equal to the map: nothing
``Flatten``, ``torch.flatten(x, 1)``,              ``arch.flatten``
``view`` / ``reshape`` to ``(N, -1)``
``Linear``                                         ``arch.fc`` (after a spatial map the weight columns are
                                                   permuted from C,H,W to our H,W,C order)
``Dropout(p)``                                     ``arch.dropout`` (p = 0: nothing)
``a + b`` of two tensors, ``Identity``             ``arch.add2`` / nothing
=================================================  =====================================================

Not representable (a diagnostic, never an approximation): ``torch.cat`` and every other op without
an arch counterpart (e.g. ``F.gelu``, ``x * y``), a conv bias not followed by batch norm (AlexNet,
plain VGG: ``arch.conv`` has no bias), non-square kernels, dilation, ``ceil_mode``, batch norm without
affine parameters or running statistics, a graph whose branches do not nest as residual blocks.

**A folded conv bias** is not a Task parameter: it keeps its imported value (under train-mode batch
norm its gradient is exactly zero). That matches ``torch.optim`` as long as the bias gets no weight
decay (tr-mlir's default, ``decay_all=False``); with ``decay_all=True`` torch would shrink the bias and,
through the running mean, shift the module's eval output, which tr-mlir does not.

**Weights.** Parameters and BN buffers are converted to the Task layouts (:mod:`tr_mlir.task`):
conv weights OIHW -> KRSC ``(O, kh, kw, I/groups)``, FC weights ``(out, in)`` with columns in NHWC
order, vectors ``(C,)``, float32. :meth:`TorchModel.task` builds a :class:`tr_mlir.Task` and loads
them; :meth:`tr_mlir.Task.state_dict` gives them back under the module's own names and layouts.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from tr_mlir.frontend.torch._capture import _Call, _from_export, _from_fx, _node_text
from tr_mlir.frontend.torch._naming import (
    NameEntry,
    TorchImportError,
    TorchNaming,
    _to_task_layout,
    _torch,
    to_torch_layout,
)
from tr_mlir.frontend.torch._tree import _fold_conv_biases, _tree

__all__ = ["NameEntry", "TorchImportError", "TorchModel", "TorchNaming", "from_torch", "load_factory", "main", "to_torch_layout",
           "train_source"]


# --------------------------------------------------------------------------------------
# The result
# --------------------------------------------------------------------------------------


@dataclass
class TorchModel:
    """An imported module: its BluePrint, weights in Task layouts and the naming back.

    Attributes:
        blueprint: the BluePrint tree (:mod:`tr_mlir.blueprint`) of the module.
        input_shape: ``(H, W, C)`` of one sample (NHWC; the module reads ``(N, C, H, W)``).
        num_classes: the module's output features (the logits of ``arch.softmax_ce``).
        parameters: Task name -> float32 array in Task layout (``Task.parameters()`` names).
        buffers: Task name -> float32 array (BN running statistics, folded conv biases subtracted).
        naming: the module's ``state_dict`` keys and how each maps (:class:`TorchNaming`).
    """

    blueprint: Any
    input_shape: tuple[int, int, int]
    num_classes: int
    parameters: dict[str, np.ndarray]
    buffers: dict[str, np.ndarray]
    naming: TorchNaming

    def module(self, *, amp: bool = False, fuse: bool = False, name: str = "model") -> Any:
        """The ``builtin.module`` holding the tree-form ``arch.model`` (what ``tr-opt`` reads)."""
        from tr_mlir.blueprint import emit

        return emit(self.blueprint, self.input_shape, num_classes=self.num_classes, amp=amp, fuse=fuse,
                    name=name)

    def task(self, batch_size: int, **kwargs: Any) -> Any:
        """A :class:`tr_mlir.Task` of this model (``kwargs`` go to ``Task``: optimizer, fuse, amp,
        ...) with the module's parameters and BN buffers loaded; its :meth:`~tr_mlir.Task.state_dict`
        uses the module's names (``task.torch_naming``, kept by ``Task.save`` / ``Task.load``). Raises :class:`tr_mlir.TaskError` for bad Task arguments and
        :class:`TorchImportError` if the compiled plan's tensors do not match the import (a bug)."""
        from tr_mlir.task import Task

        task = Task(self.blueprint, self.input_shape, self.num_classes, batch_size, **kwargs)
        want = {n: a.shape for n, a in task.parameters()} | {n: a.shape for n, a in task.buffers()}
        have = {n: a.shape for n, a in (self.parameters | self.buffers).items()}
        if want != have:
            raise TorchImportError(f"internal error: the compiled plan holds {sorted(want.items())[:4]}..., the "
                                   f"import converted {sorted(have.items())[:4]}...")
        task.load_parameters(self.parameters)
        task.load_buffers(self.buffers)
        task.torch_naming = self.naming
        return task


# --------------------------------------------------------------------------------------
# from_torch
# --------------------------------------------------------------------------------------


def _hwc(input_shape: Any) -> tuple[int, int, int]:
    if (isinstance(input_shape, (str, bytes)) or not isinstance(input_shape, Sequence) or len(input_shape) != 3
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in input_shape)):
        raise TorchImportError(f"from_torch: input_shape must be (H, W, C) of positive ints, got {input_shape!r}")
    return tuple(int(d) for d in input_shape)  # type: ignore[return-value]


@contextlib.contextmanager
def _eval_mode(module: Any) -> Iterator[None]:
    """``module`` in eval mode for the capture; every submodule's training flag restored after."""
    modes = {m: m.training for m in module.modules()}
    module.eval()
    try:
        yield
    finally:
        for m, flag in modes.items():
            m.training = flag


def _first_line(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def _capture(module: Any, example: Any, torch: Any, how: str) -> tuple[list[_Call], Any, Any]:
    """Capture ``module`` on ``example`` (``how``: ``auto``, ``export``, ``fx``) and normalize it.
    A capture that fails is a :class:`TorchImportError` naming the tracer(s) and their errors; a
    module that cannot run on the example at all (its channels or size do not fit ``input_shape``)
    is one before any tracer tries (their own tracebacks would bury the reason)."""
    try:
        with torch.no_grad():
            module(example)
    except Exception as e:  # noqa: BLE001 - the user's module refused the input: say so in one line
        n, c, h, w = tuple(example.shape)
        raise TorchImportError(f"the module does not run on an input of {h}x{w}x{c} (H x W x C, from input_shape; "
                               f"the module reads N, C, H, W = {n}, {c}, {h}, {w}): {_first_line(e)}") from None
    errors = []
    if how in ("auto", "export"):
        try:
            ep = torch.export.export(module, (example,), strict=False)
        except Exception as e:  # export cannot run (data-dependent control flow, unsupported Python, ...)
            errors.append(f"torch.export failed ({_first_line(e)})")
        else:
            return _from_export(ep, module, torch)
    if how in ("auto", "fx"):
        try:
            from torch.fx.passes.shape_prop import ShapeProp

            gm = torch.fx.symbolic_trace(module)
            ShapeProp(gm).propagate(example)
        except Exception as e:
            errors.append(f"torch.fx symbolic tracing failed ({_first_line(e)})")
        else:
            return _from_fx(gm, torch)
    raise TorchImportError(f"cannot capture {type(module).__name__}: {' and '.join(errors)}")


def from_torch(module: Any, input_shape: Sequence[int], *, capture: str = "auto") -> TorchModel:
    """Import ``module`` (a ``torch.nn.Module`` reading ``(N, C, H, W)`` float32 and returning
    ``(N, num_classes)`` logits) for inputs of one sample's shape ``input_shape = (H, W, C)`` (NHWC,
    the Task's convention).

    ``capture``: ``'auto'`` (``torch.export``, falling back to ``torch.fx``), ``'export'`` or ``'fx'``.

    Returns a :class:`TorchModel`: the BluePrint, the weights in Task layouts (float32), the naming
    back to the module's ``state_dict``. The module's own parameters are copied, not shared; its
    training flags are unchanged.

    Raises:
        TorchImportError: torch is not importable; ``module`` is not an ``nn.Module``; the module
            cannot be captured; one op is not representable (the message names the node, the op and
            the line of the module's source that made it).
    """
    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise TorchImportError(f"from_torch: expected a torch.nn.Module, got {type(module).__name__}")
    if capture not in ("auto", "export", "fx"):
        raise TorchImportError(f"from_torch: capture must be 'auto', 'export' or 'fx', got {capture!r}")
    h, w, c = _hwc(input_shape)
    example = torch.randn(2, c, h, w)
    with _eval_mode(module):
        calls, inp, out = _capture(module, example, torch, capture)
    _fold_conv_biases(calls)
    blueprint, binds = _tree(calls, inp, out)
    out_val = out.args[0][0] if isinstance(out.args[0], (list, tuple)) else out.args[0]
    meta = out_val.meta.get("val", None)
    shape = tuple(meta.shape) if meta is not None else tuple(out_val.meta["tensor_meta"].shape)
    if len(shape) != 2:
        raise TorchImportError(f"{_node_text(out_val, 'output')}: the module returns shape {shape}, expected "
                               "(N, num_classes) logits")
    num_classes = int(shape[1])

    state = {k: v.detach().cpu() for k, v in module.state_dict().items()}
    counters = {"conv": -1, "bn": -1, "fc": -1, "bn_stats": -1}
    entries: dict[str, NameEntry] = {}
    params: dict[str, np.ndarray] = {}
    buffers: dict[str, np.ndarray] = {}
    for counter, fld, e in binds:
        if counter == "":
            entries[e.torch_name] = e
            continue
        if fld in ("weight", "running_mean"):
            counters[counter] += 1
        prefix = "bn" if counter == "bn_stats" else counter
        name = f"{prefix}{counters[counter]}.{fld}"
        e = NameEntry(e.torch_name, name, e.layout, e.chw, e.value, e.shift)
        if e.torch_name in entries:
            raise TorchImportError(f"the module uses '{e.torch_name}' twice (shared layers are not representable)")
        entries[e.torch_name] = e
        value = _to_task_layout(e, state[e.torch_name].float().numpy())
        (buffers if counter == "bn_stats" else params)[name] = value
    for key, v in state.items():
        if key in entries:
            continue
        if key.endswith("num_batches_tracked") and key[: -len("num_batches_tracked")] + "running_mean" in entries:
            entries[key] = NameEntry(key, None, "batches", value=int(v.item()))
        else:
            raise TorchImportError(f"the module's state_dict entry '{key}' is not used by the captured graph "
                                   "(a parameter the forward never reads cannot be trained here)")
    naming = TorchNaming([entries[k] for k in state])
    return TorchModel(blueprint, (h, w, c), num_classes, params, buffers, naming)


# --------------------------------------------------------------------------------------
# Command line: python -m tr_mlir.frontend.torch FILE.py:FACTORY --input-shape H,W,C
# --------------------------------------------------------------------------------------


def load_factory(spec: str, num_classes: int | None = None) -> Any:
    """Import ``FILE.py`` and call ``FACTORY`` (with ``num_classes`` when it takes an argument and
    one is given); returns the ``nn.Module``. Raises :class:`TorchImportError` naming the problem
    (no such file, import failure with its line, no such factory, a result that is no module)."""
    torch = _torch()
    from tr_mlir.pyfile import PythonFileError, import_spec, takes_arguments

    try:
        path, mod, func_name = import_spec(spec, "_tr_torch_model_", "FACTORY")
    except PythonFileError as e:
        raise TorchImportError(str(e)) from None
    fn = getattr(mod, func_name, None)
    if fn is None or not callable(fn):
        raise TorchImportError(f"{path} defines no function '{func_name}'")
    takes = takes_arguments(fn, unknown=False)
    try:
        result = fn(num_classes) if takes and num_classes is not None else fn()
    except (Exception, SystemExit) as e:
        raise TorchImportError(f"{func_name}() in {path} failed: {type(e).__name__}: {e}") from None
    if not isinstance(result, torch.nn.Module):
        raise TorchImportError(f"{func_name}() in {path} must return a torch.nn.Module, got {type(result).__name__}")
    return result


def train_source(spec: str) -> Any:
    """``tr-train --torch-model FILE.py:FACTORY``: a :class:`tr_mlir.tools.train_inputs.ModelSource`
    whose ``build_for(num_classes, (H, W, C))`` imports the module for the dataset's shape and class
    count and returns the :class:`TorchModel` (the Task is made with its weights). Errors are
    ``TrainError`` s (``tr-train: error: ...``, exit 1)."""
    from tr_mlir.tools.train_inputs import ModelSource
    from tr_mlir.tools.train_options import TrainError

    def build_for(num_classes: int, shape: tuple[int, int, int]) -> TorchModel:
        try:
            imported = from_torch(load_factory(spec, num_classes), tuple(shape))
        except TorchImportError as e:
            raise TrainError(f"--torch-model {spec}: {e}") from None
        if imported.num_classes != num_classes:
            raise TrainError(f"--torch-model {spec}: the module outputs {imported.num_classes} classes, the "
                             f"dataset has {num_classes}")
        return imported

    def build(num_classes: int) -> Any:
        raise TrainError("--torch-model: the module is imported for the dataset's shape (build_for)")

    return ModelSource(spec, f"torch.nn.Module from {spec.rpartition(':')[0]}", None, 10, build,
                       build_for=build_for)


def _parse_hwc(text: str) -> tuple[int, int, int]:
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected H,W,C, got '{text}'") from None
    if len(dims) != 3 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"expected H,W,C of positive ints, got '{text}'")
    return dims  # type: ignore[return-value]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tr_mlir.frontend.torch FILE.py:FACTORY --input-shape H,W,C [--fuse] [--amp]``:
    print the module's tree-form arch IR (``tr-opt`` reads it). Exit 0; 1 with ``error: ...`` on
    stderr for a missing file, a bad factory, an op that is not representable or a bad argument."""
    ap = argparse.ArgumentParser(prog="python -m tr_mlir.frontend.torch",
                                 description="Import a PyTorch nn.Module and print its arch IR (tree form).")
    ap.add_argument("model", metavar="FILE.py:FACTORY", help="a Python file and a function returning the module")
    ap.add_argument("--input-shape", type=_parse_hwc, required=True, metavar="H,W,C", help="one sample, NHWC")
    ap.add_argument("--amp", action="store_true", help="record amp on the model")
    ap.add_argument("--fuse", action="store_true", help="record fuse on the model")
    ap.add_argument("--num-classes", type=int, default=10, metavar="N",
                    help="passed to FACTORY(num_classes) when it takes an argument, as tr-train does (default 10)")

    def usage_error(message: str) -> NoReturn:
        print(f"{ap.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(1)

    ap.error = usage_error  # type: ignore[method-assign]  # exit 1 like tr-train and tr-opt, not argparse's 2
    args = ap.parse_args(argv)
    try:
        imported = from_torch(load_factory(args.model, args.num_classes), args.input_shape)
        print(imported.module(amp=args.amp, fuse=args.fuse))
    except TorchImportError as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 1
    return 0
