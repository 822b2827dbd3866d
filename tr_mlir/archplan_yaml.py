"""The seed's ArchPlan YAML (version ``ArchPlan-1.0``): :func:`to_yaml` and :func:`from_yaml`.

The format (facts sheet sections 5.2 and 5.3) is one mapping, keys in alphabetical order::

    first_layer_index: 0          # -1 when no layer is marked
    input_spec: {c, h, w}         # the model input (C possibly AMP-aligned)
    layers:                       # in the seed's linear order
      - in_shape: [1, H, W, C]    # N is always 1
        kind: Conv                # the op's LAYER_KIND, or an Add2 marker
        name: conv
        out_shape: [1, H, W, C]
        params: {k, out_ch, p, s} # per kind, see LAYER_SPECS; absent for kinds without params
    version: ArchPlan-1.0

The text is written by hand in the layout of the seed's fkYAML output: a lone ``-`` line per
layer, block sequences for shapes, floats with 6 significant digits (``1e-05``, ``0.1``) unless
more are needed to read the same value back, and ``name: `` (trailing space) for an empty name.
For the three plans in ``shared/reference/archplan-examples`` our output differs from the
seed's only in the layer names the IR cannot know (see *Names*).

**Residual joins.** An ``arch.add %shortcut, %main`` is linearized into the seed's markers::

    Add2Start, <shortcut layers>, Add2ShortcutEnd, <main-branch layers>, Add2End

where both branches start at the value the two branches fork from (the block input). An empty
shortcut written as ``arch.identity`` (``arch-normalize-identity``) is the shortcut's Identity
layer; a shortcut that is the block input itself has no layers. Marker shapes: Add2Start has the
block input's, Add2ShortcutEnd the shortcut output's, Add2End the join's. :func:`from_yaml`
rebuilds the SSA graph from the markers (the main branch reads the block input, not the
shortcut's output: DESIGN section 7). A graph that is not a nest of such regions (a value read
by two branches that no add joins) has no linearization and is an error.

**Params.** As the seed writes them (facts sheet 5.2), plus: ``Bn1d``/``Bn2d`` write ``eps`` and
``momentum`` (the seed drops them); ``Conv`` writes ``groups`` when it is not 1; fused residual
blocks write ``eps``/``momentum`` when they differ from the defaults 1e-05/0.1; ``CBRP`` (not a
seed kind: its quadruple fusion was removed) writes its nine parameters. On reading, params a
kind needs are required (the seed reads a missing integer as 0); FC/GapFC ``bias`` defaults to
true and every ``eps``/``momentum`` to 1e-05/0.1 as in the seed; every activation kind is
readable (the seed's loader knows only ReLU and Tanh).

**Names.** The seed's names are cosmetic and partly depend on how a layer was produced, which
the IR does not record. A layer's name is its discardable attribute ``arch.layer_name`` when
set, else the seed's usual name for its kind (:data:`LAYER_SPECS`: ``conv``, ``bn``, ``relu``,
``softmax_ce``, ``bottleneck_proj_ds`` for a stride-2 projection bottleneck, ...; ``""`` for
CBR and GapFC, as the seed names fused layers). :func:`from_yaml` stores a name in
``arch.layer_name`` only when it differs from that default, so YAML -> module -> YAML keeps
every name and module -> YAML -> module adds no attribute. Known differences for the reference
plans: the seed names the CBR of a ``cbr()`` macro ``cbr`` (ResNet-18) and the max pooling of a
``cbrp()`` macro ``maxpool_cbrp`` (ResNet-50) unless the front end records those names.

**Model facts the format lacks.** The model's symbol name, ``num_classes``, ``amp`` and
``fuse`` are arguments of :func:`from_yaml` (``num_classes`` defaults to the SoftmaxCE's, and
``fuse`` to true, as a plan loaded by the seed).

**Reading checks** what building the plan checks (:func:`from_yaml`): each layer against its
op's rules and shape rule, and the plan's structure (balanced markers, no Add2 with an empty main
branch, the nesting and size limits of a BluePrint, the head's ``num_classes``). A plan without a
SoftmaxCE head (or without layers) still reads: building it appends the head.

Errors are :class:`ArchPlanYamlError` naming the line and the field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

import yaml
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.utils.exceptions import DiagnosticException, VerifyException

from tr_mlir.blueprint import MAX_NESTING
from tr_mlir.dialects import arch
from tr_mlir.errors import TrMlirError
from tr_mlir.passes.arch_expand import MAX_LAYERS

VERSION = "ArchPlan-1.0"
"""The only version the seed writes and reads."""

NAME_ATTR = "arch.layer_name"
"""Discardable attribute holding a layer's YAML name when it is not the default for its kind."""

ADD2_START, ADD2_SHORTCUT_END, ADD2_END = "Add2Start", "Add2ShortcutEnd", "Add2End"
MARKER_NAMES = {ADD2_START: "add2_start", ADD2_SHORTCUT_END: "add2_sc_end", ADD2_END: "add2_end"}
"""The seed's Add2 marker kinds and their names (facts sheet section 2.4)."""

BN_EPS, BN_MOMENTUM = 1e-5, 0.1


class ArchPlanYamlError(TrMlirError, ValueError, DiagnosticException):
    """Invalid ArchPlan YAML, or a module that has no ArchPlan YAML form.

    ``line`` (1-based, ``None`` when writing) and ``field`` (e.g. ``layers[3].params.k``) locate
    the problem; ``op`` is the offending op when writing. A ``ValueError`` (the seed raises its
    ValueError) and an xDSL ``DiagnosticException`` (so ``tr-opt`` reports it as a diagnostic).
    """

    def __init__(self, message: str, *, line: int | None = None, field: str | None = None,
                 op: Operation | None = None):
        where = "".join(
            part for part in (f"line {line}: " if line is not None else "",
                              f"{field}: " if field else "")
        )
        super().__init__(f"{where}{message}")
        self.line = line
        self.field = field
        self.op = op


# --------------------------------------------------------------------------------------
# Per-kind tables
# --------------------------------------------------------------------------------------

_REQUIRED = object()


@dataclass(frozen=True)
class Param:
    """One YAML param of a kind.

    ``key`` is the YAML key and the op property (unless ``constant`` is set: then the value is
    fixed by the kind, written always and checked when read). ``default`` is the value read when
    the key is missing (required when absent); with ``only_if_not_default`` the key is written
    only when the op's value differs from ``default``.
    """

    key: str
    type: type
    default: Any = _REQUIRED
    only_if_not_default: bool = False
    constant: Any = None

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED and self.constant is None


def _ints(*keys: str) -> tuple[Param, ...]:
    return tuple(Param(k, int) for k in keys)


_BN = (Param("eps", float, BN_EPS), Param("momentum", float, BN_MOMENTUM))
_BN_IF_SET = (
    Param("eps", float, BN_EPS, only_if_not_default=True),
    Param("momentum", float, BN_MOMENTUM, only_if_not_default=True),
)


@dataclass(frozen=True)
class LayerSpec:
    """YAML form of one op class: its params and the seed's usual name for it.

    ``name`` is a string or a function of the op's params (``bottleneck_proj_ds`` for stride 2).
    """

    params: tuple[Param, ...] = ()
    name: str | Callable[[Mapping[str, Any]], str] = ""

    def default_name(self, params: Mapping[str, Any]) -> str:
        """The seed's name for a layer of this kind with ``params``."""
        return self.name(params) if callable(self.name) else self.name


def _by_stride(base: str, ds: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda params: ds if params.get("stride") == 2 else base


LAYER_SPECS: dict[type[arch.LayerOp], LayerSpec] = {
    arch.ConvOp: LayerSpec((*_ints("k", "out_ch", "p", "s"), Param("groups", int, 1, True)), "conv"),
    arch.Bn1dOp: LayerSpec(_BN, "bn"),
    arch.Bn2dOp: LayerSpec(_BN, "bn"),
    arch.ReluOp: LayerSpec(name="relu"),
    arch.TanhOp: LayerSpec(name="tanh"),
    arch.SiluOp: LayerSpec(name="silu"),
    arch.Relu6Op: LayerSpec(name="relu6"),
    arch.LeakyReluOp: LayerSpec(name="leaky_relu"),
    arch.HardswishOp: LayerSpec(name="hardswish"),
    arch.EluOp: LayerSpec(name="elu"),
    arch.SigmoidOp: LayerSpec(name="sigmoid"),
    arch.MaxPoolOp: LayerSpec(_ints("k", "p", "s"), "maxpool"),
    arch.AvgPoolOp: LayerSpec(_ints("k", "p", "s"), "avgpool"),
    arch.GapOp: LayerSpec(name="gap"),
    arch.FcOp: LayerSpec((Param("bias", bool, True), Param("out_features", int)), "fc"),
    arch.FlattenOp: LayerSpec(name="flatten"),
    arch.ChannelPaddingOp: LayerSpec(name="channel_padding"),
    arch.IdentityOp: LayerSpec(name="identity"),
    arch.SoftmaxCeOp: LayerSpec(_ints("num_classes"), "softmax_ce"),
    arch.DropoutOp: LayerSpec((Param("p", float),), "dropout"),
    arch.CbrOp: LayerSpec((_BN[0], *_ints("k"), _BN[1], *_ints("out_ch", "p", "s")), ""),
    arch.CbrpOp: LayerSpec(
        (*_ints("conv_k", "conv_p", "conv_s"), _BN[0], _BN[1],
         *_ints("out_ch", "pool_k", "pool_p", "pool_s")),
        "cbrp",
    ),
    arch.GapFcOp: LayerSpec((Param("bias", bool, True), Param("out_features", int)), ""),
    arch.BottleneckIdentityOp: LayerSpec((*_ints("bottleneck_ch"), *_BN_IF_SET), "bottleneck_id"),
    arch.BottleneckProjectionOp: LayerSpec(
        (*_ints("bottleneck_ch"), *_BN_IF_SET, *_ints("out_ch", "stride")),
        _by_stride("bottleneck_proj", "bottleneck_proj_ds"),
    ),
    arch.BasicBlockIdentityOp: LayerSpec((*_BN_IF_SET, *_ints("out_ch")), "basicblock_id"),
    arch.BasicBlockProjectionOp: LayerSpec(
        (*_BN_IF_SET, *_ints("out_ch", "stride")), _by_stride("basicblock_proj", "basicblock_ds")
    ),
    arch.InvResidualIdentityOp: LayerSpec(
        (*_BN_IF_SET, *_ints("expand_ch"), Param("has_shortcut", bool, constant=True),
         *_ints("out_ch"), Param("stride", int, constant=1)),
        "invres_id",
    ),
    arch.InvResidualNoShortcutOp: LayerSpec(
        (*_BN_IF_SET, *_ints("expand_ch"), Param("has_shortcut", bool, constant=False),
         *_ints("out_ch", "stride")),
        _by_stride("invres_noshortcut", "invres_noshortcut_ds"),
    ),
}
"""Op class -> YAML params and default name (facts sheet sections 2.3, 2.5, 3.10, 5.2)."""

KINDS: dict[str, type[arch.LayerOp]] = {op.LAYER_KIND: op for op in LAYER_SPECS if op is not arch.BnOp}
"""YAML kind name -> op class (the markers are handled separately; plugins' kinds included)."""


def register_yaml_spec(op: type[arch.LayerOp], spec: LayerSpec) -> LayerSpec:
    """Give the (plugin) layer op class ``op`` its ArchPlan YAML form: ``spec.params`` are its
    YAML params (each a property of the op), ``spec.name`` the default layer name; its YAML kind is
    the op's ``LAYER_KIND``. Registering the same spec twice is a no-op. Returns ``spec``.

    Raises :class:`tr_mlir.errors.PluginError` when ``op`` already has another spec, its
    ``LAYER_KIND`` is another op's kind, or a param names no property of the op.
    """
    from tr_mlir.errors import PluginError

    what = getattr(op, "name", repr(op))
    if not isinstance(spec, LayerSpec):
        raise PluginError(f"register_yaml_spec({what}): expected a LayerSpec, got {type(spec).__name__}")
    old = LAYER_SPECS.get(op)
    if old is not None:
        if old == spec:
            return spec
        raise PluginError(f"register_yaml_spec({what}): '{what}' already has a YAML spec")
    kind = getattr(op, "LAYER_KIND", "")
    if not kind or (kind in KINDS and KINDS[kind] is not op) or kind in MARKER_NAMES:
        raise PluginError(f"register_yaml_spec({what}): its LAYER_KIND {kind!r} is empty or already a YAML kind")
    props = set(op.get_irdl_definition().properties)
    bad = [p.key for p in spec.params if p.constant is None and p.key not in props]
    if bad:
        raise PluginError(f"register_yaml_spec({what}): params {bad} are not properties of the op "
                          f"(it has {sorted(props)})")
    LAYER_SPECS[op] = spec
    KINDS[kind] = op
    return spec


# --------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Marker:
    kind: str
    in_type: Attribute
    out_type: Attribute
    add: arch.AddOp | None = None  # the join an Add2End stands for


_Entry = Operation | _Marker


def _model_of(module: Operation) -> arch.ModelOp:
    if isinstance(module, arch.ModelOp):
        return module
    models = [op for op in module.walk() if isinstance(op, arch.ModelOp)]
    if len(models) != 1:
        raise ArchPlanYamlError(
            f"expected exactly one 'arch.model' in the module, found {len(models)}; "
            "an ArchPlan describes one network"
        )
    return models[0]


class _Linearizer:
    """The seed's linear layer order of a flat model body, with Add2 markers."""

    def __init__(self, model: arch.ModelOp):
        self.model = model
        self.input = model.input_value
        self.forks: dict[int, SSAValue] = {}
        for op in model.body.block.ops:
            if isinstance(op, arch.AddOp):
                self.forks[id(op)] = self._fork(op)

    def _pred(self, value: SSAValue) -> SSAValue | None:
        """The value a layer's result is computed from (an add's: its fork), ``None`` at the input."""
        owner = value.owner
        if id(owner) in self.forks:  # an arch.add, the seed's Add2 pair
            return self.forks[id(owner)]
        if isinstance(owner, arch.ArchLayerOp) and len(owner.layer_inputs) == 1:
            return owner.layer_inputs[0]
        if isinstance(owner, Operation):
            raise ArchPlanYamlError(
                f"'{owner.name}' op is not an ArchPlan layer (a flat plan holds layer ops only; "
                "run arch-expand first)", op=owner,
            )
        if value is not self.input:
            raise ArchPlanYamlError("a layer reads a block argument that is not the model input")
        return None

    def _fork(self, add: arch.AddOp) -> SSAValue:
        spine: set[int] = set()
        value: SSAValue | None = add.main
        while value is not None:
            spine.add(id(value))
            value = self._pred(value)
        value = add.shortcut
        while id(value) not in spine:
            value = self._pred(value)
            assert value is not None  # the model input is on every spine
        return value

    def segment(self, value: SSAValue, stop: SSAValue | None) -> list[_Entry]:
        """Entries computing ``value`` from ``stop`` (``None``: from the model input)."""
        chain: list[Operation] = []
        while value is not stop:
            owner = value.owner
            if isinstance(owner, arch.AddOp):
                chain.append(owner)
                value = self.forks[id(owner)]
            else:
                pred = self._pred(value)
                if pred is None:
                    if stop is None:
                        break
                    raise ArchPlanYamlError("a residual branch does not start at its block input")
                chain.append(owner)  # type: ignore[arg-type]
                value = pred
        entries: list[_Entry] = []
        for op in reversed(chain):
            if isinstance(op, arch.AddOp):
                fork = self.forks[id(op)]
                entries.append(_Marker(ADD2_START, fork.type, fork.type))
                entries += self.segment(op.shortcut, fork)
                entries.append(_Marker(ADD2_SHORTCUT_END, op.shortcut.type, op.shortcut.type))
                entries += self.segment(op.main, fork)
                entries.append(_Marker(ADD2_END, op.main.type, op.output.type, op))
            else:
                entries.append(op)
        return entries

    def entries(self) -> list[_Entry]:
        """Every layer of the model once, in order; raises when the graph has no linear form."""
        if not isinstance(self.model.body.block.last_op, arch.OutputOp):
            raise ArchPlanYamlError("expected the model body to end in 'arch.output'", op=self.model)
        entries = self.segment(self.model.output_op.value, None)
        seen: dict[int, int] = {}
        for entry in entries:
            op = entry.add if isinstance(entry, _Marker) else entry
            if op is not None:
                seen[id(op)] = seen.get(id(op), 0) + 1
        for op in self.model.layers():
            count = seen.get(id(op), 0)
            if count == 0:
                raise ArchPlanYamlError(
                    f"'{op.name}' op does not lead to 'arch.output'; an ArchPlan has no dead "
                    "layers", op=op,
                )
            if count > 1:
                raise ArchPlanYamlError(
                    f"'{op.name}' op is read by two branches that no 'arch.add' joins; the graph "
                    "is not a nest of residual blocks and has no ArchPlan layer order", op=op,
                )
        return entries


def _shape(t: Attribute, what: str, op: Operation | None) -> list[int]:
    hwc = arch.static_hwc(t)
    if hwc is None:
        prefix = f"'{op.name}' op " if op is not None else ""
        raise ArchPlanYamlError(
            f"{prefix}expected a static NHWC {what} type, got {t}; run arch-deduce-shapes first",
            op=op,
        )
    return [1, *hwc]


def _float_text(v: float) -> str:
    """Six significant digits as the seed prints floats (``1e-05``, ``0.1``, ``1.0``), or
    Python's shortest round-trip form when six digits would read back as another value."""
    if not math.isfinite(v):
        return ".nan" if math.isnan(v) else (".inf" if v > 0 else "-.inf")
    text = f"{v:g}"
    if float(text) != v:
        text = repr(v)
    if not any(ch in text for ch in ".e"):
        text += ".0"
    return text


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")


def _scalar_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _float_text(v)
    s = str(v)
    if s == "":
        return ""
    if _PLAIN.fullmatch(s) and yaml.load(s, Loader=_Loader) == s:
        return s
    return json.dumps(s)


def layer_params(op: arch.LayerOp) -> dict[str, Any]:
    """The YAML params of ``op`` (keys sorted), as :data:`LAYER_SPECS` says."""
    spec = LAYER_SPECS[type(op)]
    values = op.params()
    out: dict[str, Any] = {}
    for p in spec.params:
        if p.constant is not None:
            out[p.key] = p.constant
            continue
        value = values[p.key]
        if p.only_if_not_default and value == p.default:
            continue
        out[p.key] = value
    return dict(sorted(out.items()))


def layer_name(op: arch.LayerOp) -> str:
    """``op``'s YAML name: its ``arch.layer_name`` attribute, else the default for its kind."""
    attr = op.attributes.get(NAME_ATTR)
    if isinstance(attr, StringAttr):
        return attr.data
    return LAYER_SPECS[type(op)].default_name(op.params())


def _layer_lines(kind: str, name: str, in_shape: list[int], out_shape: list[int],
                 params: Mapping[str, Any]) -> list[str]:
    lines = ["  -", "    in_shape:", *(f"      - {d}" for d in in_shape),
             f"    kind: {kind}", f"    name: {_scalar_text(name)}",
             "    out_shape:", *(f"      - {d}" for d in out_shape)]
    if params:
        lines.append("    params:")
        lines += [f"      {k}: {_scalar_text(v)}" for k, v in params.items()]
    return lines


def to_yaml(module: Operation) -> str:
    """The ArchPlan YAML of the single ``arch.model`` in ``module`` (or of a model op).

    Needs a flat body (layer ops and ``arch.add``) with static NHWC types. Raises
    :class:`ArchPlanYamlError` otherwise, or when the graph has no linear layer order.
    """
    model = _model_of(module)
    entries = _Linearizer(model).entries()
    ops = model.layers()
    first = model.first_layer
    first_index = -1
    if first is not None:
        # the entry carrying the op (an add: its Add2End), moved left over the markers that
        # carry no op, so that the seed's positional mark 0 stays 0 (from_yaml maps an index
        # to the first op at or after it)
        target = ops[first.value.data]
        pos = next(i for i, e in enumerate(entries)
                   if e is target or (isinstance(e, _Marker) and e.add is target))
        while pos > 0 and isinstance(entries[pos - 1], _Marker) and entries[pos - 1].add is None:
            pos -= 1
        first_index = pos
    h, w, c = model.input_hwc
    lines = [f"first_layer_index: {first_index}", "input_spec:", f"  c: {c}", f"  h: {h}",
             f"  w: {w}"]
    lines.append("layers:" if entries else "layers: []")
    for entry in entries:
        if isinstance(entry, _Marker):
            lines += _layer_lines(entry.kind, MARKER_NAMES[entry.kind],
                                  _shape(entry.in_type, f"{entry.kind} input", entry.add),
                                  _shape(entry.out_type, f"{entry.kind} output", entry.add), {})
            continue
        if type(entry) not in LAYER_SPECS:
            raise ArchPlanYamlError(
                f"'{entry.name}' op has no ArchPlan layer kind (a flat ArchPlan holds the layers "
                "of steps 1-10: run arch-plan first)", op=entry,
            )
        op: arch.LayerOp = entry  # type: ignore[assignment]
        lines += _layer_lines(op.LAYER_KIND, layer_name(op),
                              _shape(op.input.type, "input", op), _shape(op.output.type, "result", op),
                              layer_params(op))
    lines.append(f"version: {VERSION}")
    return "\n".join(lines) + "\n"


def print_archplan_yaml(module: ModuleOp, stream: IO[str]) -> None:
    """Write :func:`to_yaml` of ``module`` to ``stream`` (the ``tr-opt -t archplan-yaml`` target)."""
    stream.write(to_yaml(module))


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, also reading ``1e-05`` (no dot: YAML 1.2, and the seed's output)
    as a float; PyYAML's YAML 1.1 resolver would read it as a string."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)

_I64_LIMIT = 1 << 63
"""Integers are i64 properties: values must lie in [-2^63, 2^63)."""

_TYPE_NAMES = {int: "an integer", float: "a number", bool: "a boolean (true/false)", str: "a string"}


@dataclass
class _Reader:
    """Node-level access with line numbers (``yaml.compose``) for the validation messages."""

    loader: _Loader = field(default_factory=lambda: _Loader(""))

    @staticmethod
    def line(node: yaml.Node) -> int:
        return node.start_mark.line + 1

    def fail(self, node: yaml.Node, path: str, message: str) -> ArchPlanYamlError:
        return ArchPlanYamlError(message, line=self.line(node), field=path or None)

    def mapping(self, node: yaml.Node, path: str, allowed: Iterable[str]) -> dict[str, yaml.Node]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, path, f"expected a mapping, got {self.describe(node)}")
        allowed = tuple(allowed)
        out: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = self.scalar(key_node, path)
            sub = f"{path}.{key}" if path else str(key)
            if not isinstance(key, str) or key not in allowed:
                expected = ", ".join(allowed) if allowed else "none"
                raise self.fail(key_node, sub, f"unknown key '{key}' (expected: {expected})")
            if key in out:
                raise self.fail(key_node, sub, "duplicate key")
            out[key] = value_node
        return out

    def scalar(self, node: yaml.Node, path: str) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, path, f"expected a scalar, got {self.describe(node)}")
        return self.construct(node, path)

    def construct(self, node: yaml.ScalarNode, path: str) -> Any:
        """The value of a scalar node. A tag the safe loader does not know (``!!python/object``)
        or a value its tag cannot take (``!!int x``, ``!!float x``) is an error at the node (PyYAML
        raised its ``ConstructorError``, or a bare ``ValueError`` without the line)."""
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as e:
            raise self.fail(node, path, f"invalid YAML: {e.problem}") from None
        except (ValueError, TypeError, OverflowError) as e:
            raise self.fail(node, path, f"invalid value {node.value!r} for its tag {node.tag} ({e})") from None

    def typed(self, node: yaml.Node, path: str, kind: type) -> Any:
        value = self.scalar(node, path)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
            raise self.fail(node, path, f"expected {_TYPE_NAMES[kind]}, got {value!r}")
        if kind is int and not -_I64_LIMIT <= value < _I64_LIMIT:
            raise self.fail(node, path, f"expected an integer that fits in 64 bits, got {value}")
        return value

    def shape(self, node: yaml.Node, path: str) -> tuple[int, int, int]:
        if not isinstance(node, yaml.SequenceNode) or len(node.value) != 4:
            raise self.fail(node, path, f"expected a list of 4 integers [N, H, W, C], got "
                                        f"{self.describe(node)}")
        dims = [self.typed(d, f"{path}[{i}]", int) for i, d in enumerate(node.value)]
        for i, (d, dim_node) in enumerate(zip(dims, node.value)):
            if d < 1:
                raise self.fail(dim_node, f"{path}[{i}]", f"expected a positive size, got {d}")
        if dims[0] != 1:
            raise self.fail(node.value[0], f"{path}[0]",
                            f"expected N = 1 (the batch is bound later), got {dims[0]}")
        return (dims[1], dims[2], dims[3])

    def describe(self, node: yaml.Node) -> str:
        if isinstance(node, yaml.MappingNode):
            return "a mapping"
        if isinstance(node, yaml.SequenceNode):
            n = len(node.value)
            return f"a list of {n} item{'' if n == 1 else 's'}"
        return repr(self.construct(node, ""))


@dataclass
class _Region:
    """An open Add2 region while reading: the block input and, after ShortcutEnd, the shortcut."""

    fork: SSAValue
    line: int
    shortcut: SSAValue | None = None


def _fmt_shape(hwc: tuple[int, int, int] | None) -> str:
    return "unknown" if hwc is None else f"[1, {hwc[0]}, {hwc[1]}, {hwc[2]}]"


def from_yaml(text: str, *, sym_name: str = "model", num_classes: int | None = None,
              amp: bool = False, fuse: bool = True) -> ModuleOp:
    """Parse ArchPlan YAML into a module holding one flat ``arch.model``.

    ``num_classes`` defaults to the last SoftmaxCE's (else the last layer's output C);
    ``fuse`` defaults to true like a plan the seed loads (facts sheet 5.4). Layers are checked as
    they are read: known kind, params present and well typed and within the op's rules,
    ``in_shape`` equal to the shape the layer reads, ``out_shape`` equal to its shape rule,
    balanced Add2 markers. So are the structural rules that building a plan from a BluePrint
    applies: every Add2 has a main branch with a layer that is not an Identity (the seed's
    "Empty stem in add2", checked at every depth as ``arch-normalize-identity`` does), Add2
    regions nest at most :data:`~tr_mlir.blueprint.MAX_NESTING` deep, the plan has at most
    :data:`~tr_mlir.passes.arch_expand.MAX_LAYERS` ops, and a plan ending in a SoftmaxCE has the
    model's ``num_classes`` there. Raises :class:`ArchPlanYamlError` naming the line and the field.
    """
    reader = _Reader()
    try:
        root = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise ArchPlanYamlError(f"invalid YAML: {e.problem or e}",
                                line=mark.line + 1 if mark else None) from e
    except yaml.reader.ReaderError as e:  # a character YAML does not allow; PyYAML gives its offset
        at = e.position if isinstance(text, str) else 0
        ch = e.character if isinstance(e.character, int) else ord(e.character)
        column = at - (text.rfind("\n", 0, at) + 1) + 1
        raise ArchPlanYamlError(f"invalid YAML: character U+{ch:04X} at column {column} is not allowed in "
                                f"YAML ({e.reason})", line=text.count("\n", 0, at) + 1) from None
    except yaml.YAMLError as e:
        raise ArchPlanYamlError(f"invalid YAML: {e}") from e
    except RecursionError:
        raise ArchPlanYamlError("invalid YAML: nested too deeply (Python recursion limit reached); "
                                "an ArchPlan nests three levels") from None
    if root is None:
        raise ArchPlanYamlError("empty document; expected an ArchPlan mapping", line=1)
    top = reader.mapping(root, "", ("first_layer_index", "input_spec", "layers", "version"))

    version_node = top.get("version")
    version = "(missing)" if version_node is None else reader.scalar(version_node, "version")
    if version != VERSION:
        raise ArchPlanYamlError(f"Unsupported YAML version: {version} (expected {VERSION})",
                                line=reader.line(version_node or root), field="version")
    for key in ("input_spec", "layers", "first_layer_index"):
        if key not in top:
            raise reader.fail(root, key, "missing field")

    spec = reader.mapping(top["input_spec"], "input_spec", ("c", "h", "w"))
    hwc = []
    for key in ("h", "w", "c"):
        if key not in spec:
            raise reader.fail(top["input_spec"], f"input_spec.{key}", "missing field")
        value = reader.typed(spec[key], f"input_spec.{key}", int)
        if value < 1:
            raise reader.fail(spec[key], f"input_spec.{key}", f"expected a positive size, got {value}")
        hwc.append(value)
    input_hwc = (hwc[0], hwc[1], hwc[2])

    layers_node = top["layers"]
    if not isinstance(layers_node, yaml.SequenceNode):
        raise reader.fail(layers_node, "layers", f"expected a list, got {reader.describe(layers_node)}")

    model = arch.ModelOp(sym_name, input_hwc, num_classes or 1, amp=amp, fuse=fuse)
    block = model.body.block
    current: SSAValue = model.input_value
    regions: list[_Region] = []
    ops_before: list[int] = []
    softmax_classes: int | None = None
    head: tuple[arch.SoftmaxCeOp, yaml.Node, str] | None = None  # the last SoftmaxCE read
    for i, node in enumerate(layers_node.value):
        path = f"layers[{i}]"
        ops_before.append(len(block.ops))
        fields = reader.mapping(node, path, ("in_shape", "kind", "name", "out_shape", "params"))
        for key in ("kind", "in_shape", "out_shape"):
            if key not in fields:
                raise reader.fail(node, f"{path}.{key}", "missing field")
        kind = reader.typed(fields["kind"], f"{path}.kind", str)
        name_node = fields.get("name")
        name = "" if name_node is None else reader.scalar(name_node, f"{path}.name")
        if name is None:
            name = ""
        if not isinstance(name, str):
            raise reader.fail(name_node, f"{path}.name", f"expected a string, got {name!r}")
        in_hwc = reader.shape(fields["in_shape"], f"{path}.in_shape")
        out_hwc = reader.shape(fields["out_shape"], f"{path}.out_shape")
        reads = arch.static_hwc(current.type)
        if in_hwc != reads:
            what = "the model input" if current is model.input_value else "the value it reads"
            raise reader.fail(fields["in_shape"], f"{path}.in_shape",
                              f"expected {_fmt_shape(reads)} ({what}), got {_fmt_shape(in_hwc)}")

        if len(block.ops) >= MAX_LAYERS and kind not in (ADD2_START, ADD2_SHORTCUT_END):
            raise reader.fail(node, path, f"the plan has more than {MAX_LAYERS} layers (ops, one per "
                                          f"Add2End), the most a model may have")
        if kind in MARKER_NAMES:
            _params(reader, fields, path, ())  # markers take no params
            if kind != ADD2_END and out_hwc != in_hwc:
                raise reader.fail(fields["out_shape"], f"{path}.out_shape",
                                  f"expected {_fmt_shape(in_hwc)} ({kind} keeps the shape), "
                                  f"got {_fmt_shape(out_hwc)}")
            if kind == ADD2_START:
                if len(regions) >= MAX_NESTING:
                    raise reader.fail(fields["kind"], f"{path}.kind",
                                      f"Add2 regions nested more than {MAX_NESTING} deep (this Add2Start "
                                      f"opens level {len(regions) + 1}); a BluePrint nests seq/add2/repeat "
                                      f"at most {MAX_NESTING} levels")
                regions.append(_Region(current, reader.line(node)))
            elif kind == ADD2_SHORTCUT_END:
                if not regions or regions[-1].shortcut is not None:
                    raise reader.fail(fields["kind"], f"{path}.kind",
                                      "Add2ShortcutEnd without a matching Add2Start")
                regions[-1].shortcut = current
                current = regions[-1].fork
            else:
                if not regions:
                    raise reader.fail(fields["kind"], f"{path}.kind",
                                      "Add2End without a matching Add2Start")
                region = regions.pop()
                if region.shortcut is None:
                    raise reader.fail(fields["kind"], f"{path}.kind",
                                      f"Add2End without an Add2ShortcutEnd for the Add2Start at "
                                      f"line {region.line}")
                if _skip_identities(current) is region.fork:
                    only = ("" if current is region.fork
                            else " but Identity layers (building the plan removes them)")
                    raise reader.fail(fields["kind"], f"{path}.kind",
                                      f"Empty stem in add2: the main branch of the Add2Start at line "
                                      f"{region.line} has no layer{only}; give the main branch (between "
                                      f"Add2ShortcutEnd and Add2End) at least one layer")
                shortcut_hwc = arch.static_hwc(region.shortcut.type)
                if shortcut_hwc != in_hwc:
                    raise reader.fail(fields["kind"], f"{path}.kind",
                                      f"the shortcut gives {_fmt_shape(shortcut_hwc)} but the main "
                                      f"branch gives {_fmt_shape(in_hwc)}; Add2End needs equal shapes")
                if out_hwc != in_hwc:
                    raise reader.fail(fields["out_shape"], f"{path}.out_shape",
                                      f"expected {_fmt_shape(in_hwc)} (the joined branches), got "
                                      f"{_fmt_shape(out_hwc)}")
                add = arch.AddOp(region.shortcut, current, arch.nhwc_type(*out_hwc))
                _verify(add, reader, node, path, kind)
                block.add_op(add)
                current = add.output
            continue

        op_class = KINDS.get(kind)
        if op_class is None:
            known = ", ".join([*KINDS, *MARKER_NAMES])
            raise reader.fail(fields["kind"], f"{path}.kind",
                              f"unknown kind: {kind} (known kinds: {known})")
        layer_spec = LAYER_SPECS[op_class]
        params_node = fields.get("params")
        params_fields = _params(reader, fields, path, [p.key for p in layer_spec.params])
        props: dict[str, Any] = {}
        for p in layer_spec.params:
            ppath = f"{path}.params.{p.key}"
            if p.key not in params_fields:
                if p.required:
                    raise reader.fail(params_node if params_node is not None else node, ppath,
                                      f"missing field (a {kind} layer needs "
                                      f"{', '.join(q.key for q in layer_spec.params if q.required)})")
                if p.constant is None:
                    props[p.key] = p.default
                continue
            value = reader.typed(params_fields[p.key], ppath, p.type)
            if p.constant is not None:
                if value != p.constant:
                    raise reader.fail(params_fields[p.key], ppath,
                                      f"expected {_scalar_text(p.constant)} for {kind}, got "
                                      f"{_scalar_text(value)}")
                continue
            props[p.key] = value
        op = op_class(current, arch.nhwc_type(*out_hwc), **props)
        if name != layer_spec.default_name(op.params()):
            op.attributes[NAME_ATTR] = StringAttr(name)
        where = params_node if params_node is not None else fields["kind"]
        try:
            op.verify_params()
        except VerifyException as e:
            raise reader.fail(where, f"{path}.params", f"{kind} layer: {e}") from e
        try:
            expected = op.infer_hwc(in_hwc)
        except VerifyException as e:
            raise reader.fail(where, f"{path}.params",
                              f"{kind} layer on input {_fmt_shape(in_hwc)}: {e}") from e
        if expected != out_hwc:
            raise reader.fail(fields["out_shape"], f"{path}.out_shape",
                              f"expected {_fmt_shape(expected)} ({kind} of {_fmt_shape(in_hwc)}), "
                              f"got {_fmt_shape(out_hwc)}")
        _verify(op, reader, node, path, kind)
        block.add_op(op)
        current = op.output
        if isinstance(op, arch.SoftmaxCeOp):
            softmax_classes = op.param("num_classes")
            head = (op, params_fields.get("num_classes", where), f"{path}.params.num_classes")

    if regions:
        raise ArchPlanYamlError("Add2Start has no matching Add2End", line=regions[-1].line,
                                field="layers")
    block.add_op(arch.OutputOp(current))

    first_node = top["first_layer_index"]
    first = reader.typed(first_node, "first_layer_index", int)
    n = len(layers_node.value)
    if first != -1:
        if not 0 <= first < n:
            raise reader.fail(first_node, "first_layer_index",
                              f"expected -1 or an index in [0, {n}), got {first}")
        # the first op at or after that layer (balanced markers end in an op-carrying Add2End)
        model.properties["first_layer"] = IntegerAttr(ops_before[first], i64)

    if num_classes is None:
        last = arch.static_hwc(current.type)
        num_classes = softmax_classes if softmax_classes is not None else (last or input_hwc)[2]
    elif head is not None and head[0].output is current and head[0].param("num_classes") != num_classes:
        op, where, path = head
        raise reader.fail(where, path,
                          f"expected num_classes = {num_classes} (the num_classes given to from_yaml) "
                          f"for the SoftmaxCE head, got {op.param('num_classes')}; a built plan ends "
                          f"in one SoftmaxCE over the model's num_classes logits")
    model.properties["num_classes"] = IntegerAttr(num_classes, i64)
    module = ModuleOp([model])
    try:
        module.verify()
    except VerifyException as e:
        raise ArchPlanYamlError(f"the plan does not verify: {e}") from e
    return module


def _skip_identities(value: SSAValue) -> SSAValue:
    """The value an ``arch.identity`` chain ending in ``value`` starts from (``value`` if none)."""
    while isinstance(value.owner, arch.IdentityOp):
        value = value.owner.input
    return value


def _params(reader: _Reader, fields: Mapping[str, yaml.Node], path: str,
            allowed: Iterable[str]) -> dict[str, yaml.Node]:
    """The ``params`` mapping of a layer (absent or null: empty), keys checked against ``allowed``."""
    node = fields.get("params")
    if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"):
        return {}
    return reader.mapping(node, f"{path}.params", allowed)


def _verify(op: Operation, reader: _Reader, node: yaml.Node, path: str, kind: str) -> None:
    try:
        op.verify()
    except VerifyException as e:
        raise reader.fail(node, path, f"{kind} layer: {e}") from e
