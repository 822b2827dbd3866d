"""The extension API: everything a plugin needs to add an op, a fusion and its kernels.

A plugin is one Python file or module (``examples/plugins/conv_relu.py`` is a complete one; the
walk-through is ``docs/fusion-tutorial.md``). Loading it (:func:`load_plugin`: ``tr-opt
--load-plugin FILE``, ``tr-train --plugin FILE``, ``Task(..., plugins=[FILE])``, or an installed
package's ``tr_mlir.plugins`` entry point) runs its registrations:

=====================================  =========================================================
what                                   how
=====================================  =========================================================
an op of the ``arch`` dialect           :func:`register_op` (an IRDL ``LayerOp``), or
                                        :func:`fused_op` (built from a chain of existing ops)
a residual block (conv + bn stages,     :func:`register_residual_block` (a :class:`ResidualSpec`:
shortcut, add)                          op, descriptor, YAML form; ``arch-merge-blocks`` fuses it)
a pass (``tr-opt -p``, ``xdsl-opt``)     :func:`register_pass` (any ``ModulePass`` class)
a fusion step of ``arch-plan``          :func:`register_fusion_step` (where it runs, by default
                                        or only when named: ``arch-plan{extra="..."}``)
a pattern pass for a chain              :func:`fusion_pass` (matches the op's chain, rewrites it)
a layer descriptor (memplan phases)     :func:`register_descriptor`; :func:`chain_descriptor`
                                        composes the chain's descriptors (the default kernels)
a kernel family (node-op vocabulary)    :func:`register_kernel_id` (a :class:`KernelId`: name,
                                        precisions, operand row), or implicitly by :func:`kernel`
a kernel (CPU)                          :func:`kernel` (decorator), its node operands
                                        (``operands=``, or :func:`register_operands`)
a kernel (CUDA)                         :func:`register_cuda_kernel`
the ArchPlan YAML form                  :func:`register_yaml_spec`
the ONNX form of a primitive op         :func:`register_onnx_form` (``tr_mlir.export.onnx``)
=====================================  =========================================================

:func:`register_fused_chain` does the whole common case in one call: the op from a chain, its
descriptor composed from the chain's descriptors (so it runs the existing kernels and trains bit
for bit like the unfused model), its YAML form, its fusion pass and its fusion step.

Op knowledge other passes and tools need is declared on the op as traits
(:class:`~tr_mlir.dialects.arch.IsFused`, :class:`~tr_mlir.dialects.arch.ReadsSpatialMap`,
:class:`~tr_mlir.dialects.arch.FeatureProducer`, :class:`~tr_mlir.dialects.arch.AlignsAmpInput`,
:class:`~tr_mlir.dialects.arch.NeedsFlatInput`, ...); :func:`fused_op` derives them from the chain.

After a plugin module ran, :func:`check` validates what is registered: every plugin op has a
descriptor and a YAML spec, every kernel an operand row, every node op a descriptor emits a
kernel; each gap is a :class:`~tr_mlir.errors.PluginError` naming the op or kernel and the call
that fills it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.builtin import I64, IntegerAttr, UnitAttr, i64
from xdsl.irdl import BaseAttr, OptPropertyDef, irdl_op_definition, opt_prop_def, prop_def, traits_def
from xdsl.passes import ModulePass
from xdsl.traits import OpTrait, Pure

from tr_mlir.archplan_yaml import LAYER_SPECS, LayerSpec, Param, register_yaml_spec
from tr_mlir.dialects import arch
from tr_mlir.dialects.arch import (
    HWC,
    IN,
    ConvStage,
    LayerOp,
    ResidualBlockOp,
    ResidualSpec,
    Shortcut,
    register_op,
    registered_ops,
)
from tr_mlir.errors import PluginError, TrMlirError
from tr_mlir.dialects.kernels import (
    KERNEL_IDS,
    OPERANDS,
    PRECISIONS,
    K,
    KernelId,
    KernelIdError,
    Operands,
    binding_problem,
    register_kernel_id,
    register_operands,
)
from tr_mlir.lowering.cpu.registry import KERNELS, KernelSpec
from tr_mlir.lowering.cpu.registry import kernel as _cpu_kernel
from tr_mlir.passes import PASSES, register_pass
from tr_mlir.passes._descriptors import (
    DESCRIPTORS,
    Descriptor,
    DescriptorError,
    LayerCtx,
    LayerPlan,
    NodePattern,
    TensorDesc,
    register_descriptor,
    residual_descriptor,
)
from tr_mlir.passes._fusion import Chain, ChainMatch, FuseChain, Link, reads_model_input, replace_ops, rewrite_models
from tr_mlir.passes.arch_plan import FUSION_STEPS, register_fusion_step

__all__ = [
    "Chain", "ChainMatch", "ConvStage", "Descriptor", "DescriptorError", "FuseChain", "FusedChainOp", "IN", "K",
    "KernelId", "KernelIdError", "KernelSpec", "LayerCtx", "LayerOp", "LayerPlan", "LayerSpec", "Link", "NodePattern",
    "Operands", "Param", "PluginError", "ResidualBlockOp", "ResidualSpec", "Shortcut", "TensorDesc", "TrMlirError",
    "chain_descriptor", "chain_position", "chain_tensor_name", "check", "fused_op", "fusion_pass", "kernel",
    "load_plugin", "load_plugins", "loaded_plugins", "plugin_frame", "plugin_spec", "reads_model_input",
    "register_cuda_kernel", "register_descriptor", "register_fused_chain", "register_fusion_step",
    "register_kernel_id", "register_op", "register_operands", "register_onnx_form", "register_pass",
    "register_residual_block", "register_yaml_spec", "registered_ops", "replace_ops", "residual_descriptor",
    "rewrite_models", "scoped",
]

ENTRY_POINT_GROUP = "tr_mlir.plugins"
"""The entry point group of installed plugin packages: each entry names a module (or an object in
it) that registers when imported (``[project.entry-points."tr_mlir.plugins"] my_fusion =
"my_pkg.fusion"``)."""


# --------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------


def kernel(name: str | KernelId, *, writes: Sequence[str], operands: Operands | None = None,
           precisions: Sequence[str] = PRECISIONS,
           **options: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Decorator registering a CPU kernel function under ``name`` (the precision-free kernel name:
    node ops ``NAME_FP32_FWD`` / ``NAME_AMP_FWD`` both bind ``name_fwd``), as the built-in kernels
    are (:func:`tr_mlir.lowering.cpu.registry.kernel`: arrays are the positional parameters, static
    params the keyword-only ones; ``writes``, ``workspaces``, ``workspace_fn``,
    ``target_workspace_fns``, ``kind``, ``also``, ``prepare`` in ``options``; ``prepare``: the
    ready call for bound arrays, :class:`~tr_mlir.lowering.cpu.registry.PreparedLaunch`), and,
    with ``operands``, its operand
    row (:func:`register_operands`) in the same place: the kernel and its node interface declared
    once. A name (``name`` and each of ``also``) that is no family of the vocabulary yet is
    declared one (:func:`register_kernel_id`, with ``precisions``: ``()`` for a precision-free op
    such as ``RANGE_MY_UPDATE``). Raises :class:`~tr_mlir.errors.PluginError` for a name
    registered twice or that is no snake_case name, ``writes`` that are not array arguments, or
    an operand row naming an argument the function does not have.
    """
    names = (name, *options.get("also", ()))
    try:
        for n in names:
            if n not in KERNEL_IDS:
                register_kernel_id(KernelId(str(n), precisions=precisions))
        deco = _cpu_kernel(name, writes=writes, **options)
    except (TypeError, KernelIdError) as e:
        raise PluginError(f"kernel('{name}'): {e}") from None

    def register(fn: Callable[..., None]) -> Callable[..., None]:
        try:
            out = deco(fn)
        except ValueError as e:
            raise PluginError(str(e)) from None
        if operands is not None:
            for n in names:
                register_operands(n, operands)
            bad = _row_problems(KERNELS[name], operands)
            if bad:
                raise PluginError(f"kernel('{name}'): its operand row names {bad}, which are not array arguments "
                                  f"of {fn.__name__} ({list(KERNELS[name].arrays)})")
        return out

    return register


def _row_problems(spec: KernelSpec, row: Operands) -> list[str]:
    """The argument names of ``row`` that ``spec``'s function does not take."""
    return [a for a in row.arguments if a not in spec.arrays]


def register_cuda_kernel(name: str, factory: Callable[[Any], Callable[..., None]]) -> None:
    """Give the kernel ``name`` (registered for the CPU with :func:`kernel`) a CUDA implementation:
    ``factory(ops)`` receives the backend's ``GpuOps`` (``ops.compile`` / ``ops.launch`` build and
    run CUDA C++ source) and returns the launcher, called with the CPU function's arguments.
    Without one, the CUDA backend refuses only models whose graphs run the kernel, naming it.

    Raises :class:`~tr_mlir.errors.PluginError` when no kernel ``name`` is registered.
    """
    from tr_mlir.lowering.cuda.backend import register_cuda_kernel as reg

    try:
        reg(name, factory)
    except KeyError as e:
        raise PluginError(str(e.args[0])) from None


# --------------------------------------------------------------------------------------
# Fused ops built from a chain of existing ops
# --------------------------------------------------------------------------------------


class _SubOp:
    """One op of a chain, seen through the fused op: its own properties (defaults filled), the
    fused op's name for diagnostics, and the chain class's methods (``infer_hwc``, ...)."""

    def __init__(self, cls: type[LayerOp], fused: LayerOp, params: Mapping[str, Any]):
        self._cls, self._fused, self._params = cls, fused, dict(params)
        self.name = fused.name

    def params(self) -> dict[str, Any]:
        return dict(self._params)

    def param(self, name: str) -> Any:
        return self._params[name]

    @property
    def properties(self) -> dict[str, Any]:
        return {k: v for k, v in self._fused.properties.items() if k in self._cls.get_irdl_definition().properties}

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._cls, attr)
        return value.__get__(self) if callable(value) and hasattr(value, "__get__") else value


def chain_tensor_name(position: int, name: str) -> str:
    """The fused layer's name for chain op ``position``'s descriptor tensor ``name``
    (``s<position>_<name>``: ``s0_conv_weight``), as :func:`chain_descriptor` plans it."""
    return f"s{position}_{name}"


def chain_position(tensor: str) -> int | None:
    """The chain position a :func:`chain_tensor_name` encodes, None for any other name (a shared
    workspace keeps its own)."""
    head, sep, _ = tensor.partition("_")
    return int(head[1:]) if sep and head[:1] == "s" and head[1:].isdigit() else None


class FusedChainOp(LayerOp):
    """Base of the ops :func:`fused_op` builds: one layer standing for ``CHAIN`` (a producer-first
    tuple of single-input layer op classes). ``PROPERTY_OF`` maps each property to the chain
    position and the chain op's property name it stands for. Shape and property rules are the
    chain's, applied in order (:meth:`sub_ops`)."""

    CHAIN: ClassVar[tuple[type[LayerOp], ...]] = ()
    PROPERTY_OF: ClassVar[Mapping[str, tuple[int, str]]] = {}

    def sub_params(self) -> list[dict[str, Any]]:
        """Each chain op's properties as Python values (its defaults and unit flags included)."""
        mine = self.params()
        out: list[dict[str, Any]] = []
        for i, cls in enumerate(self.CHAIN):
            params = {name: False for name in cls.unit_property_names()}
            for prop, (j, sub) in self.PROPERTY_OF.items():
                if j == i and prop in mine:
                    params[sub] = mine[prop]
            out.append(params)
        return out

    def tensor_params(self, tensor: str) -> dict[str, Any]:
        """The chain op's properties for one of this layer's tensors (:func:`chain_position`);
        this op's own for any other name (a shared workspace)."""
        i = chain_position(tensor)
        return self.sub_params()[i] if i is not None and i < len(self.CHAIN) else self.params()

    def sub_ops(self) -> list[_SubOp]:
        """The chain ops as views of this op (for their ``verify_params`` / ``infer_hwc`` rules)."""
        return [_SubOp(cls, self, p) for cls, p in zip(self.CHAIN, self.sub_params())]

    def sub_hwcs(self, hwc: HWC) -> list[HWC]:
        """(H, W, C) after each chain op for input ``hwc``."""
        out = []
        for sub in self.sub_ops():
            hwc = sub.infer_hwc(hwc)
            out.append(hwc)
        return out

    def verify_params(self) -> None:
        for sub in self.sub_ops():
            sub.verify_params()

    def infer_hwc(self, hwc: HWC) -> HWC:
        return self.sub_hwcs(hwc)[-1]

    def channels_after(self, c: int) -> int:
        for sub in self.sub_ops():
            c = sub.channels_after(c)
        return c


def _derived_traits(chain: Sequence[type[LayerOp]]) -> list[OpTrait]:
    """The traits a fused op inherits from its chain (module doc of :mod:`tr_mlir.dialects.arch`)."""
    first, last = chain[0], chain[-1]
    traits: list[OpTrait] = [Pure(), arch.IsFused()]
    if any(c.has_trait(arch.ReadsSpatialMap) for c in chain):
        traits.append(arch.ReadsSpatialMap())
    if last.has_trait(arch.FeatureProducer):
        traits.append(arch.FeatureProducer())
    for t in first.traits:  # the reader of the model input decides the AMP alignment and the flatten rule
        if isinstance(t, (arch.AlignsAmpInput, arch.NeedsFlatInput)):
            traits.append(t)
    return traits


def _optional(pdef: Any) -> bool:
    return isinstance(pdef, OptPropertyDef)


def _is_unit(pdef: Any) -> bool:
    return isinstance(pdef.constr, BaseAttr) and pdef.constr.attr is UnitAttr


def _format(props: Mapping[str, Any]) -> str:
    """The custom syntax of a fused op: each property as the chain ops spell theirs (a unit flag
    ``bias``, ``name = value``; optional and defaulted ones may be left out)."""
    parts = []
    for name, pdef in props.items():
        if _is_unit(pdef):
            parts.append(f"(`{name}` ${name}^)?")
        elif _optional(pdef) or pdef.default_value is not None:
            parts.append(f"(`{name}` `=` ${name}^)?")
        else:
            parts.append(f"`{name}` `=` ${name}")
    return f"$input {' '.join(parts)} attr-dict `:` type($input) `->` type($output)".replace("  ", " ")


def fused_op(name: str, chain: Sequence[type[LayerOp]], *, layer_kind: str,
             prefixes: Sequence[str] | None = None, doc: str | None = None,
             traits: Sequence[OpTrait] = ()) -> type[FusedChainOp]:
    """Build and register the arch op ``name`` standing for ``chain`` (producer first).

    Its properties are the chain ops' properties: the same names, or ``<prefix>_<name>`` with
    ``prefixes`` (one per chain op; needed when two chain ops share a property name, e.g.
    ``conv_k`` / ``pool_k``). Its shape, channel and property rules apply the chain's in order
    (:class:`FusedChainOp`); its traits are :class:`~tr_mlir.dialects.arch.IsFused`, ``Pure`` and
    those it inherits (a chain reading a spatial map reads one; the last op's
    ``FeatureProducer``; the first op's AMP-alignment and flatten rules), plus ``traits``.
    Custom assembly: ``arch.conv_relu %x out_ch = 8 k = 3 p = 1 : type -> type``.

    Raises :class:`~tr_mlir.errors.PluginError` for an empty chain, a chain op that is not a
    single-input layer, clashing property names, or what :func:`register_op` refuses.
    """
    chain = tuple(chain)
    if not chain:
        raise PluginError(f"fused_op('{name}'): the chain is empty")
    for c in chain:
        if not (isinstance(c, type) and issubclass(c, LayerOp)):
            raise PluginError(f"fused_op('{name}'): {c!r} is not a single-input arch layer op class")
    if prefixes is not None and len(prefixes) != len(chain):
        raise PluginError(f"fused_op('{name}'): {len(prefixes)} prefixes for a chain of {len(chain)} ops")
    props: dict[str, Any] = {}
    owner: dict[str, tuple[int, str]] = {}
    for i, c in enumerate(chain):
        for pname, pdef in c.get_irdl_definition().properties.items():
            key = f"{prefixes[i]}_{pname}" if prefixes is not None else pname
            if key in props:
                raise PluginError(
                    f"fused_op('{name}'): {chain[owner[key][0]].name} and {c.name} both have a property '{pname}'; "
                    f"pass prefixes=(...) (one per chain op) to name them apart")
            props[key] = pdef
            owner[key] = (i, pname)
    body: dict[str, Any] = {
        "name": name,
        "LAYER_KIND": layer_kind,
        "CHAIN": chain,
        "PROPERTY_OF": owner,
        "__doc__": doc or f"{' + '.join(c.name for c in chain)} (fused by a plugin; tr_mlir.extend.fused_op).",
        "traits": traits_def(*_derived_traits(chain), *traits),
        "assembly_format": _format(props),
        "__module__": sys._getframe(1).f_globals.get("__name__", __name__),
        "__annotations__": {"LAYER_KIND": ClassVar[str], "CHAIN": ClassVar[tuple], "PROPERTY_OF": ClassVar[dict]},
    }
    for key, pdef in props.items():
        body[key] = (opt_prop_def(pdef.constr, default_value=pdef.default_value) if _optional(pdef)
                     else prop_def(pdef.constr, default_value=pdef.default_value))
    cls_name = "".join(part.capitalize() for part in name.removeprefix("arch.").split("_")) + "Op"
    cls = irdl_op_definition(type(cls_name, (FusedChainOp,), body))
    return register_op(cls)  # type: ignore[return-value]


# --------------------------------------------------------------------------------------
# Descriptors composed from the chain's descriptors
# --------------------------------------------------------------------------------------


def _rename(pattern: NodePattern, names: Mapping[str, str], params: Mapping[str, Any]) -> NodePattern:
    def sub(o: str) -> str:
        return names.get(o, o)

    node_params = pattern.params if pattern.params is not None else tuple(params.items())
    return replace(pattern, inputs=tuple(sub(o) for o in pattern.inputs),
                   outputs=tuple(sub(o) for o in pattern.outputs), params=node_params)


def chain_descriptor(op: type[FusedChainOp]) -> Descriptor:
    """The descriptor of a :func:`fused_op`: its chain's descriptors composed, so the fused layer
    runs exactly the kernels the unfused chain runs, in the same order, on the same values (its
    default kernels: training is bit-identical to the unfused model).

    Per chain op ``i`` the descriptor builds the op's plan in the fused layer's variant (input the
    previous op's output shape; ``first`` only for op 0; ``output_kept`` from the next op's
    ``bwd_reads_input``, the last op's from the fused layer's consumers), then wires it in: the
    chain's values are the ops' output tensors, a value's gradient overwrites it (the seed's in-place
    dX) unless its producer reads it in backward (then ``<output>_grad``, as phase 1 gives an
    unfused layer) or its consumer's descriptor names a ``dx_tensor``. Forward and inference run the
    chain in order, backward in reverse. Tensor names are the chain ops', prefixed ``s<i>_`` (chain op
    ``i``; ``s0_conv_weight``, ``s1_relu_output``); the kernels' shared workspaces (``ws_*``) are
    planned by the chain ops' rules.

    Raises :class:`~tr_mlir.errors.PluginError` when a chain op has no descriptor.
    """
    chain = op.CHAIN
    missing = [c.name for c in chain if c not in DESCRIPTORS]
    if missing:
        raise PluginError(f"chain_descriptor({op.name}): no descriptor for chain ops {missing}")
    subs = [DESCRIPTORS[c] for c in chain]

    def build(ctx: LayerCtx) -> LayerPlan:
        fused: FusedChainOp = ctx.op  # type: ignore[assignment]
        sub_params = fused.sub_params() if isinstance(fused, FusedChainOp) else [dict(ctx.params)] * len(chain)
        n = ctx.inputs[0][0]
        hwcs = fused.sub_hwcs(tuple(ctx.inputs[0][1:])) if isinstance(fused, FusedChainOp) else []
        shapes = [(n, *hwc) for hwc in hwcs] if hwcs else [ctx.output] * len(chain)
        plans: list[LayerPlan] = []
        in_shape = ctx.inputs[0]
        for i, d in enumerate(subs):
            kept = ctx.output_kept if i == len(subs) - 1 else subs[i + 1].bwd_reads_input
            sctx = LayerCtx(ctx.op, sub_params[i], (in_shape,), shapes[i], ctx.amp, ctx.first and i == 0,
                            ctx.target, kept)
            plans.append(d.build(sctx))
            in_shape = shapes[i]
        names: list[dict[str, str]] = []
        for i, p in enumerate(plans):
            names.append({t.name: (t.name if t.shared else chain_tensor_name(i, t.name)) for t in p.tensors})
        lp = LayerPlan(bwd_reads_output=plans[-1].bwd_reads_output)
        outputs = [names[i][d.output] for i, d in enumerate(subs)]
        for i, p in enumerate(plans):
            for t in p.tensors:
                lp.add(names[i][t.name], t.region, t.dtype, t.shape, t.shared)
        grads: list[str] = []  # where the gradient of chain value i lives inside the fused layer
        for i in range(len(subs) - 1):
            if subs[i + 1].dx_tensor is not None:
                grads.append(names[i + 1][subs[i + 1].dx_tensor])
            elif subs[i].bwd_reads_output or plans[i].bwd_reads_output:
                t = next(t for t in lp.tensors if t.name == outputs[i])
                grads.append(lp.add(f"{outputs[i]}_grad", ctx.gslot, t.dtype, t.shape))
            else:
                grads.append(outputs[i])
        last = len(plans) - 1
        wiring = [{**names[i], "$x": "$x" if i == 0 else outputs[i - 1], "$dy": "$dy" if i == last else grads[i],
                   "$dx": "$dx" if i == 0 else grads[i - 1]} for i in range(len(plans))]
        for i, p in enumerate(plans):  # forward and inference in chain order
            lp.forward += [_rename(q, wiring[i], sub_params[i]) for q in p.forward]
            lp.inference += [_rename(q, wiring[i], sub_params[i]) for q in p.inference]
        for i in reversed(range(len(plans))):  # backward in reverse
            lp.backward += [_rename(q, wiring[i], sub_params[i]) for q in plans[i].backward]
        return lp

    build.__doc__ = f"{op.name}: the composed descriptors of {[c.name for c in chain]}."
    first, last = subs[0], subs[-1]
    return Descriptor(build, f"s{len(subs) - 1}_{last.output}",
                      dx_tensor=None if first.dx_tensor is None else f"s0_{first.dx_tensor}",
                      bwd_reads_output=last.bwd_reads_output, bwd_reads_input=first.bwd_reads_input,
                      first_layer_ok=first.first_layer_ok)


# --------------------------------------------------------------------------------------
# Fusion passes
# --------------------------------------------------------------------------------------


def fusion_pass(pass_name: str, op: type[FusedChainOp], *, links: Sequence[Link] | None = None,
                allow_model_input: bool | None = None) -> type[ModulePass]:
    """A ``ModulePass`` named ``pass_name`` that replaces every single-use chain of ``op.CHAIN``
    (in a flat ``arch.model``) by ``op`` with the chain ops' properties.

    ``links``: the chain's links with predicates (default: one plain :class:`Link` per chain op).
    ``allow_model_input``: fuse a chain that reads the model input (default: only when the first
    chain op's descriptor may be a first layer, ``first_layer_ok``: a conv may, a bn may not).
    The returned class is not registered: pass it to :func:`register_pass`.
    """
    chain = Chain(*(links if links is not None else [Link(c) for c in op.CHAIN]))
    if allow_model_input is None:
        d = DESCRIPTORS.get(op.CHAIN[0])
        allow_model_input = bool(d and d.first_layer_ok)

    def build(match: ChainMatch) -> FusedChainOp | None:
        if not allow_model_input and reads_model_input(match.input):
            return None
        params: dict[str, Any] = {}
        for prop, (i, sub) in op.PROPERTY_OF.items():
            value = match.ops[i].params().get(sub)
            if value is not None:
                params[prop] = value
        return op(match.input, match.result_type, **params)

    def apply(self: ModulePass, ctx: Context, module: ModuleOp) -> None:
        rewrite_models(module, FuseChain(chain, build))

    cls = type("".join(w.capitalize() for w in pass_name.split("-")) + "Pass", (ModulePass,), {
        "name": pass_name, "apply": apply,
        "__doc__": f"Fuse {' -> '.join(c.name for c in op.CHAIN)} into {op.name} (tr_mlir.extend.fusion_pass).",
    })
    return dataclass(frozen=True)(cls)


def register_fused_chain(name: str, chain: Sequence[type[LayerOp]], *, layer_kind: str, pass_name: str,
                         after: str | None = "arch-merge-binary", before: str | None = None, default: bool = True,
                         prefixes: Sequence[str] | None = None, yaml_name: str | None = None,
                         links: Sequence[Link] | None = None, doc: str | None = None) -> type[FusedChainOp]:
    """The common case in one call: :func:`fused_op` ``name`` from ``chain``, its
    :func:`chain_descriptor`, its YAML form (the properties as params, ``yaml_name`` or the op's
    short name as the default layer name), the :func:`fusion_pass` ``pass_name``, registered, and
    a fusion step of ``arch-plan`` (``after`` / ``before`` / ``default`` as
    :func:`register_fusion_step`). Returns the op class. Raises
    :class:`~tr_mlir.errors.PluginError` as the functions it calls.
    """
    if before is not None:
        after = None
    op = fused_op(name, chain, layer_kind=layer_kind, prefixes=prefixes, doc=doc)
    register_descriptor(op, chain_descriptor(op), workspaces=False)
    params = []
    for key, pdef in op.get_irdl_definition().properties.items():
        i, sub = op.PROPERTY_OF[key]
        base = LAYER_SPECS.get(chain[i])
        found = next((p for p in (base.params if base else ()) if p.key == sub), None)
        if found is not None:
            params.append(replace(found, key=key))
        else:
            params.append(Param(key, object))
    register_yaml_spec(op, LayerSpec(tuple(sorted(params, key=lambda p: p.key)),
                                     yaml_name or name.removeprefix("arch.")))
    register_pass(fusion_pass(pass_name, op, links=links))
    register_fusion_step(pass_name, after=after, before=before, default=default)
    return op


# --------------------------------------------------------------------------------------
# Residual blocks
# --------------------------------------------------------------------------------------

_BN_PARAMS = (Param("eps", float, 1e-5, only_if_not_default=True),
              Param("momentum", float, 0.1, only_if_not_default=True))


_RESERVED_BLOCK_PROPERTIES = frozenset({"eps", "momentum", "name", "input", "output", "LAYER_KIND", "RESIDUAL",
                                        "assembly_format"})
"""Names a residual block's stage properties cannot take: the op's own fields and operands."""


def register_residual_block(name: str, spec: ResidualSpec, *, layer_kind: str, yaml_name: str | None = None,
                            doc: str | None = None) -> type[ResidualBlockOp]:
    """A fused residual block declared by its structure, as the built-in ones are.

    Builds the :class:`ResidualBlockOp` ``name`` whose ``RESIDUAL`` is ``spec`` (its properties:
    one integer per property the stages name, a stride property defaulting to 1, and the shared
    batch-norm ``eps`` / ``momentum``; its shape rule and channel count from the spec) and
    registers it with its descriptor (:func:`residual_descriptor`: the stages' conv, bn and relu
    kernels, so it trains bit for bit like the unfused block), its YAML form (``yaml_name`` or the
    op's short name) and so ``arch-merge-blocks`` fuses the spec's primitive subgraph into it
    (after the built-in blocks: a subgraph a built-in block matches stays that block). Syntax:
    ``arch.my_block %x mid_ch = 8 out_ch = 16 stride = 2 : type -> type``.

    Raises :class:`~tr_mlir.errors.PluginError` when ``spec`` is no :class:`ResidualSpec`, names
    ``eps`` / ``momentum`` or a property that is no identifier, or for what :func:`register_op`
    refuses.
    """
    if not isinstance(name, str) or not name:
        raise PluginError(f"register_residual_block: expected the op name as a string ('arch.my_block'), got {name!r}")
    if not isinstance(spec, ResidualSpec):
        raise PluginError(f"register_residual_block('{name}'): expected a ResidualSpec, got {type(spec).__name__}")
    strides = {st.stride for st in spec.main if isinstance(st.stride, str)}
    props: dict[str, Any] = {}
    syntax: list[str] = []
    for key in spec.properties:
        if not key.isidentifier() or key in _RESERVED_BLOCK_PROPERTIES:
            raise PluginError(f"register_residual_block('{name}'): '{key}' cannot name a block property")
        if key in strides:
            props[key] = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
            syntax.append(f"(`{key}` `=` ${key}^)?")
        else:
            props[key] = prop_def(IntegerAttr[I64])
            syntax.append(f"`{key}` `=` ${key}")
    syntax += ["(`eps` `=` $eps^)?", "(`momentum` `=` $momentum^)?"]
    body: dict[str, Any] = {
        "name": name,
        "LAYER_KIND": layer_kind,
        "RESIDUAL": spec,
        "__doc__": doc or f"A {spec.family} ({spec.shortcut.value} shortcut; tr_mlir.extend.register_residual_block).",
        "assembly_format": f"$input {' '.join(syntax)} attr-dict `:` type($input) `->` type($output)",
        "__module__": sys._getframe(1).f_globals.get("__name__", __name__),
        "__annotations__": {"LAYER_KIND": ClassVar[str], "RESIDUAL": ClassVar[ResidualSpec]},
        **props,
    }
    cls_name = "".join(part.capitalize() for part in name.removeprefix("arch.").split("_")) + "Op"
    op = register_op(irdl_op_definition(type(cls_name, (ResidualBlockOp,), body)))
    register_descriptor(op, residual_descriptor(op))
    params = [Param(key, int, 1, only_if_not_default=True) if key in strides else Param(key, int)
              for key in spec.properties]
    register_yaml_spec(op, LayerSpec(tuple(sorted((*params, *_BN_PARAMS), key=lambda p: p.key)),
                                     yaml_name or name.removeprefix("arch.")))
    return op  # type: ignore[return-value]


# --------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------


def register_onnx_form(op: type[LayerOp], form: Callable[[Any, Any], None]) -> None:
    """Register ``form(graph, op)`` as the ONNX form of arch op class ``op``: given the
    :class:`tr_mlir.export.OnnxGraph` being built and the op (of the unfused fp32 plan), it appends
    its ONNX nodes (``graph.node``) and defines the op's output (``graph.define``). Needed only for
    a primitive op a plugin adds (fused ops are exported unfused). Raises
    :class:`~tr_mlir.errors.PluginError` when ``op`` is not an arch layer op class or ``form`` is
    not callable."""
    from tr_mlir.export import ONNX_FORMS

    if not (isinstance(op, type) and issubclass(op, LayerOp)):
        raise PluginError(f"register_onnx_form: expected an arch LayerOp class, got {op!r}")
    if not callable(form):
        raise PluginError(f"register_onnx_form: the ONNX form of {op.__name__} must be callable, got {form!r}")
    ONNX_FORMS[op] = form


# --------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------


def check() -> None:
    """Validate the registries (every entry, the plugins' and the built-in ones alike).

    * every layer op (:func:`~tr_mlir.dialects.arch.layer_ops`) has a descriptor and a YAML spec;
    * every plugin kernel has an operand row and every operand row a kernel;
    * every registered pass is a ``ModulePass``; every fusion step a registered pass.

    Raises :class:`~tr_mlir.errors.PluginError` listing each gap with the call that fills it.
    """
    problems: list[str] = []
    for op in arch.layer_ops():
        if op is arch.BnOp:  # the bn macro: arch-rename-bn makes it bn1d / bn2d
            continue
        if op not in DESCRIPTORS:
            problems.append(f"op '{op.name}' has no layer descriptor: tr_mlir.extend.register_descriptor({op.__name__}, "
                            "...) (or chain_descriptor for a fused_op)")
        if op not in LAYER_SPECS and op is not arch.AddOp:
            problems.append(f"op '{op.name}' has no ArchPlan YAML form: tr_mlir.extend.register_yaml_spec("
                            f"{op.__name__}, LayerSpec(...))")
    for name, spec in KERNELS.items():
        # built-in kernels without a row (the fused reference kernels, LARS's split form) are not
        # bound by any descriptor's nodes; a plugin's kernel exists to be bound
        if name not in OPERANDS and not spec.fn.__module__.startswith("tr_mlir."):
            problems.append(f"kernel '{name}' has no operand row: tr_mlir.extend.register_operands('{name}', "
                            "Operands(...))")
    for name, row in OPERANDS.items():
        if name not in KERNELS:
            problems.append(f"operand row '{name}' has no kernel: register one with @tr_mlir.extend.kernel('{name}', ...)")
        elif _row_problems(KERNELS[name], row):
            problems.append(f"operand row '{name}' names {_row_problems(KERNELS[name], row)}, which are not array "
                            f"arguments of its kernel ({list(KERNELS[name].arrays)})")
    for name, entry in PASSES.items():
        if not isinstance(entry, str) and not (isinstance(entry, type) and issubclass(entry, ModulePass)):
            problems.append(f"pass '{name}' is not a ModulePass class")
    for step in FUSION_STEPS:
        if step.name not in PASSES:
            problems.append(f"fusion step '{step.name}' is not a registered pass")
    if problems:
        raise PluginError("the registries are incomplete:\n  " + "\n  ".join(problems))


def check_nodes(patterns: Iterable[NodePattern], where: str) -> None:
    """Every node op in ``patterns`` has a family, a kernel and an operand row
    (:func:`tr_mlir.dialects.kernels.binding_problem`); raises
    :class:`~tr_mlir.errors.PluginError` naming the op, the layer (``where``) and the fix."""
    for p in patterns:
        problem = binding_problem(p.op)
        if problem:
            raise PluginError(f"{where}: {problem}")


# --------------------------------------------------------------------------------------
# Loading plugins
# --------------------------------------------------------------------------------------

_LOADED: dict[str, ModuleType] = {}
"""Canonical plugin spec (:func:`plugin_spec`) -> its module, in load order."""


def _is_file_spec(key: str) -> bool:
    return key.endswith(".py") or os.sep in key or (os.altsep is not None and os.altsep in key)


def plugin_spec(spec: str | os.PathLike[str]) -> str:
    """The canonical form of a plugin spec: a file's absolute resolved path, or a module name as
    given. ``Task.save`` records this form, so a checkpoint loads its plugins from any directory."""
    key = os.fspath(spec)
    return str(Path(key).resolve()) if _is_file_spec(key) else key


def _origin(key: str) -> str | None:
    """The resolved file a spec runs: the file itself, or a module's source file (found without
    importing it); ``None`` when there is none."""
    if _is_file_spec(key):
        return key
    try:
        found = importlib.util.find_spec(key)
    except (ImportError, ValueError):
        return None
    origin = getattr(found, "origin", None)
    return str(Path(origin).resolve()) if origin and origin not in ("built-in", "frozen") else None


def loaded_plugins() -> tuple[str, ...]:
    """The plugins loaded in this process, in load order (canonical specs, :func:`plugin_spec`)."""
    return tuple(_LOADED)


def load_plugin(spec: str | os.PathLike[str]) -> ModuleType:
    """Load one plugin: a Python file (``path/to/fusion.py``) or an importable module name
    (``my_pkg.fusion``); its top level runs its registrations, then :func:`check` validates them.
    Loading the same spec twice is a no-op (returns the module).

    Raises :class:`~tr_mlir.errors.PluginError` naming the plugin: a file that does not exist, a
    module that cannot be imported, an exception its code raised (with the plugin's own line), or
    what :func:`check` finds missing.
    """
    given = os.fspath(spec)
    key = plugin_spec(given)
    if key in _LOADED:
        return _LOADED[key]
    origin = _origin(key)
    for loaded, module in _LOADED.items():  # one file under two spellings (a path and a module name)
        if origin is not None and _origin(loaded) == origin:
            return module
    path = Path(key)
    is_file = _is_file_spec(key)
    try:
        if is_file:
            if path.is_dir():
                raise PluginError(f"plugin '{given}': is a directory; name the plugin's .py file (or its module)")
            if not path.is_file():
                raise PluginError(f"plugin '{given}': no such file")
            name = f"tr_mlir_plugin_{path.stem}"
            if name in sys.modules:
                name = f"{name}_{abs(hash(key)) % 10**8}"
            loader_spec = importlib.util.spec_from_file_location(name, path)
            if loader_spec is None or loader_spec.loader is None:
                raise PluginError(f"plugin '{key}': not a Python file Python can load")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[name] = module
            try:
                loader_spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(name, None)
                raise
        else:
            try:
                module = importlib.import_module(key)
            except ModuleNotFoundError as e:
                if e.name is not None and key.startswith(e.name):
                    raise PluginError(f"plugin '{given}': no such file or importable module") from None
                raise
    except PluginError as e:
        if str(e).startswith(f"plugin '{given}'"):
            raise
        raise PluginError(f"plugin '{given}': {e}") from e
    except SyntaxError as e:
        raise PluginError(f"plugin '{given}': {e.filename}:{e.lineno}: syntax error: {e.msg}") from None
    except Exception as e:  # noqa: BLE001 - the plugin's own code failed: say where
        raise PluginError(f"plugin '{given}': {_where(e, key)}{type(e).__name__}: {e}") from e
    _LOADED[key] = module
    check()
    return module


def _where(e: BaseException, key: str) -> str:
    """``file:line: `` of the innermost frame of ``e`` inside the plugin, or ``""``."""
    import traceback

    frames = traceback.extract_tb(e.__traceback__)
    mine = [f for f in frames if key.endswith(".py") and os.path.abspath(f.filename) == os.path.abspath(key)]
    f = (mine or frames[-1:] or [None])[-1]
    return f"{f.filename}:{f.lineno}: " if f is not None else ""


def plugin_frame(e: BaseException) -> str | None:
    """``'plugin FILE: FILE:LINE'`` when the innermost frame of ``e``'s traceback that runs code of
    a loaded plugin (its descriptor's ``build``, its pass, its kernel) exists, else ``None``: the
    tools report such an exception as the plugin's error, not as a bug of tr-mlir."""
    import traceback

    files = {}
    for key, module in _LOADED.items():
        f = getattr(module, "__file__", None)
        if f:
            files[os.path.abspath(f)] = key
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        key = files.get(os.path.abspath(frame.filename))
        if key is not None:
            return f"plugin '{key}': {frame.filename}:{frame.lineno}"
    return None


def load_plugins(specs: Iterable[str | os.PathLike[str]] = (), *, entry_points: bool = True) -> list[ModuleType]:
    """Load every spec in ``specs`` (:func:`load_plugin`) and, with ``entry_points``, every
    installed plugin of the :data:`ENTRY_POINT_GROUP` entry point group. Returns the modules.
    Raises :class:`~tr_mlir.errors.PluginError` for the first plugin that fails."""
    modules = []
    if entry_points:
        from importlib.metadata import entry_points as eps

        for ep in eps(group=ENTRY_POINT_GROUP):
            modules.append(load_plugin(ep.module))
    modules += [load_plugin(s) for s in specs]
    return modules


@contextlib.contextmanager
def scoped() -> Iterator[None]:
    """Undo, on exit, every registration made inside the block (ops, passes, fusion steps,
    descriptors, kernel families and their operand rows, kernels, CUDA implementations, YAML specs, ONNX
    forms, loaded plugins): the
    registries are process-wide, so a test, a notebook comparing fusions, or a sweep over plugins
    uses this to keep one plugin's registrations from reaching the next. Objects created inside
    keep working once built: compile a Task inside the block (``Task.compile()`` or a first
    ``train_step``; a Task compiles lazily, and one first compiled after the block no longer sees the
    plugin's fusion steps); new lookups no longer find the plugin's entries."""
    from tr_mlir.archplan_yaml import KINDS
    from tr_mlir.export import ONNX_FORMS
    from tr_mlir.lowering.cuda import backend as cuda_backend
    from tr_mlir.passes import _descriptors

    saved = [(d, dict(d)) for d in (PASSES, DESCRIPTORS, _descriptors._REGISTERED, KERNEL_IDS, KERNELS, LAYER_SPECS,
                                    KINDS, cuda_backend.CUDA_IMPLS, ONNX_FORMS, _LOADED)]
    steps, ops = list(FUSION_STEPS), list(arch._REGISTERED)
    try:
        yield
    finally:
        for d, old in saved:
            d.clear()
            d.update(old)
        FUSION_STEPS[:] = steps
        arch._REGISTERED[:] = ops


