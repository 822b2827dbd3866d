"""Fuzzing of the ArchPlan YAML reader (issue 15): mutated plans through :func:`from_yaml`, with
``hypothesis``.

The seeds are the seed's three plans (``shared/reference/archplan-examples``) and our own plans
of small zoo models, fused and unfused (residual markers, every kind of the zoo). Each example
applies one to three mutations:

* to the text: a line deleted, duplicated, moved or re-indented, the text truncated, YAML syntax
  put in (a tab, ``:``, ``- ``, a flow collection, an anchor or alias, a tag such as
  ``!!python/object``, a directive, a document marker, an alias bomb);
* to the data (read, changed, written again): a value anywhere replaced by one of another type
  or an odd one (huge, negative, zero, NaN, infinity, a string, a list, a mapping, null), an
  integer nudged (plus or minus one, doubled, negated, 0 or 1), a key
  deleted or renamed, two layers swapped, a layer duplicated or deleted, a kind or a param moved
  from one layer to another.

Then :func:`from_yaml` either returns a module that verifies, writes back (:func:`to_yaml`) and
reads back to the same YAML, and builds (``arch-plan``: a clean diagnostic at most), or raises an
:class:`ArchPlanYamlError` that names the line; never another exception or a hang.

Modes: CI runs :data:`CI_EXAMPLES` examples, derandomized (the same examples every run);
``TR_MLIR_FUZZ_EXAMPLES=N`` runs N random examples instead (a failure prints the
``@reproduce_failure`` blob to replay it). Every failure found became a named regression test
below the fuzz test.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import event as _event
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from xdsl.utils.exceptions import DiagnosticException

from tr_mlir.archplan_yaml import ArchPlanYamlError, from_yaml, to_yaml
from tr_mlir.compile import arch_plan, make_context
from tr_mlir.passes.arch_plan import ArchPlanPass
from tr_mlir.zoo import MODELS

EXAMPLES_ENV = "TR_MLIR_FUZZ_EXAMPLES"
CI_EXAMPLES = 300
"""Examples in CI (about 10 s); ``TR_MLIR_FUZZ_EXAMPLES`` overrides."""

_LONG = os.environ.get(EXAMPLES_ENV)
FUZZ = settings(max_examples=int(_LONG) if _LONG else CI_EXAMPLES, derandomize=not _LONG, deadline=None,
                database=None, print_blob=True, phases=[p for p in Phase if p is not Phase.explain],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

REFERENCE = Path("/work/shared/reference/archplan-examples")
ZOO = {"mlp_digits": (8, 8, 1), "resnet_tiny": (8, 8, 1), "depthwise_tiny": (8, 8, 1), "lenet5": (32, 32, 1),
       "mobilenet_tiny": (32, 32, 3), "resnet8_cifar": (32, 32, 3)}

def event(what: str) -> None:
    """hypothesis' ``event`` (the statistics of ``--hypothesis-show-statistics``), also callable
    from the regression tests."""
    if currently_in_test_context():
        _event(what)



def _seeds() -> dict[str, str]:
    seeds = {p.name: p.read_text() for p in sorted(REFERENCE.glob("*.yaml"))} if REFERENCE.is_dir() else {}
    for name, shape in ZOO.items():
        for fuse in (False, True):
            plan = arch_plan(MODELS[name].blueprint(10), shape, amp=False, fuse=fuse, num_classes=10)
            seeds[f"{name}{'.fused' if fuse else ''}"] = to_yaml(plan)
    return seeds


SEEDS = _seeds()

ODD_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3),
    st.sampled_from([2 ** 31, 2 ** 63, 2 ** 64, -(2 ** 63) - 1, 10 ** 30]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e-5, 0.5, -0.0, 1e300]),
    st.text(max_size=5), st.sampled_from(["Conv", "CBR", "Add2Start", "Add2End", "Add2ShortcutEnd", "ArchPlan-1.0",
                                          "SoftmaxCE", "Identity", "BasicBlockProjection", "", "~", "1e-05"]),
    st.lists(st.integers(-1, 40), max_size=5), st.dictionaries(st.sampled_from(["k", "s", "p", "x"]),
                                                               st.integers(-1, 3), max_size=2),
)
"""Values of every YAML type, some of them values the plans hold elsewhere."""

SNIPPETS = ["\t", ": ", "- ", "{", "}", "[", "]", "&a ", "*a", "*b", "!!python/object:os.system ", "!!binary ",
            "%YAML 1.2\n", "---\n", "...\n", "? ", "|\n", ">\n", "#", "'", '"', "\x00", "\ufeff", "<<: *a\n", ",",
            "!!float ", "!!int ", "!!str ", "@", "`"]
BOMB = "bomb: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"b{i}: &{chr(98 + i)} [{', '.join(['*' + (chr(97 + i) if i else 'a')] * 9)}]\n" for i in range(8))


def _paths(obj: Any, limit: int = 20_000) -> list[tuple]:
    """Paths of the values in ``obj``, at most ``limit`` (aliases share values: the bomb has 9^9)."""
    out: list[tuple] = []
    todo: list[tuple[tuple, Any]] = [((), obj)]
    while todo and len(out) < limit:
        path, value = todo.pop()
        out.append(path)
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        todo.extend(((*path, k), v) for k, v in items)
    return out


def _at(obj: Any, path: tuple) -> Any:
    for k in path:
        obj = obj[k]
    return obj


def mutate_data(draw, text: str) -> tuple[str, str]:
    """One mutation of the plan's data; returns (text, what was done)."""
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, TypeError, RecursionError):
        return text, "(not YAML any more)"
    if not isinstance(data, dict):
        return text, "(not a mapping any more)"
    layers = data.get("layers") if isinstance(data.get("layers"), list) else []
    how = draw(st.sampled_from(["set", "set", "nudge", "nudge", "delete", "rename", "swap layers", "duplicate layer",
                                "delete layer", "move kind", "move params"]))
    paths = _paths(data)[1:] or [()]
    if how == "set" and paths != [()]:
        where = draw(st.sampled_from(paths))
        _at(data, where[:-1])[where[-1]] = draw(ODD_VALUES)
        what = f"set {where}"
    elif how == "nudge" and (ints := [p for p in paths if type(_at(data, p)) is int]):
        where = draw(st.sampled_from(ints))
        old = _at(data, where)
        _at(data, where[:-1])[where[-1]] = draw(st.sampled_from([old + 1, old - 1, 2 * old, 0, 1, -old]))
        what = f"nudge {where}"
    elif how in ("delete", "rename") and paths != [()]:
        dict_paths = [p for p in paths if isinstance(_at(data, p[:-1]), dict)] or [paths[0]]
        where = draw(st.sampled_from(dict_paths))
        parent = _at(data, where[:-1])
        value = parent.pop(where[-1])
        if how == "rename":
            parent[draw(st.sampled_from(["kind", "name", "params", "k", "x", "in_shape", "Kind"]))] = value
        what = f"{how} {where}"
    elif layers and how in ("swap layers", "duplicate layer", "delete layer"):
        i, j = draw(st.integers(0, len(layers) - 1)), draw(st.integers(0, len(layers) - 1))
        if how == "swap layers":
            layers[i], layers[j] = layers[j], layers[i]
        elif how == "duplicate layer":
            layers.insert(j, layers[i])
        else:
            del layers[i]
        what = f"{how} {i} {j}"
    elif layers and how in ("move kind", "move params"):
        i, j = draw(st.integers(0, len(layers) - 1)), draw(st.integers(0, len(layers) - 1))
        key = "kind" if how == "move kind" else "params"
        if isinstance(layers[i], dict) and isinstance(layers[j], dict) and key in layers[i]:
            layers[j][key] = layers[i][key]
        what = f"{how} {i} -> {j}"
    else:
        what = "(nothing)"
    style = draw(st.sampled_from([False, None, True]))  # block, mixed, flow
    try:
        return yaml.safe_dump(data, default_flow_style=style, sort_keys=False), what
    except (yaml.YAMLError, ValueError):
        return text, what + " (unwritable)"


def mutate_text(draw, text: str) -> tuple[str, str]:
    """One mutation of the plan's text; returns (text, what was done)."""
    lines = text.splitlines(keepends=True) or [""]
    how = draw(st.sampled_from(["delete line", "duplicate line", "move line", "indent", "truncate", "snippet",
                                "snippet", "bomb"]))
    i = draw(st.integers(0, len(lines) - 1))
    if how == "delete line":
        del lines[i]
    elif how == "duplicate line":
        lines.insert(draw(st.integers(0, len(lines))), lines[i])
    elif how == "move line":
        lines.insert(draw(st.integers(0, len(lines))), lines.pop(i))
    elif how == "indent":
        lines[i] = draw(st.sampled_from(["", " ", "   ", "\t"])) + lines[i].lstrip(" ") if draw(st.booleans()) \
            else " " * draw(st.integers(1, 6)) + lines[i]
    elif how == "truncate":
        return text[:draw(st.integers(0, len(text)))], how
    elif how == "snippet":
        at = draw(st.integers(0, len(lines[i])))
        lines[i] = lines[i][:at] + draw(st.sampled_from(SNIPPETS)) + lines[i][at:]
    else:
        return BOMB + text, how
    return "".join(lines), f"{how} {i}"


@st.composite
def mutated_plan(draw) -> tuple[str, str, list[str]]:
    name = draw(st.sampled_from(sorted(SEEDS)), label="seed")
    text, done = SEEDS[name], []
    for _ in range(draw(st.integers(1, 3), label="mutations")):
        text, what = (mutate_data if draw(st.booleans(), label="data") else mutate_text)(draw, text)
        done.append(what)
    return name, text, done


def read(text: str, num_classes: int | None):
    """``from_yaml``: the module, or ``None`` after an ArchPlanYamlError that names the line."""
    try:
        module = from_yaml(text, num_classes=num_classes)
    except ArchPlanYamlError as e:
        assert e.line is not None and e.line >= 1, f"the error names no line: {e}"
        assert str(e).startswith(f"line {e.line}: "), e
        event("error: " + " ".join(str(e).split(": ", 2)[-1].split()[:3])[:40])
        return None
    return module


@FUZZ
@given(case=mutated_plan(), classes=st.sampled_from([None, None, 10, 1000, 3]))
def test_fuzz_mutated_archplan_yaml(case, classes):
    name, text, done = case
    module = read(text, classes)
    if module is None:
        return
    event("read")
    module.verify()
    again = to_yaml(module)
    assert to_yaml(from_yaml(again, num_classes=classes)) == again
    model = module.ops.first
    try:
        ArchPlanPass().apply(make_context(), module)
        module.verify()
    except DiagnosticException as e:
        assert str(e).strip()
        event("arch-plan refused")
    else:
        event("built")
    assert model is module.ops.first


# --------------------------------------------------------------------------------------
# Regression tests: each failure the fuzzer found
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("old", "new", "message"), [
    ("first_layer_index: 0", "first_layer_index: !!int zero", "first_layer_index: invalid value 'zero' for its tag"),
    ("  h: 8", "  h: !!float x", "input_spec.h: invalid value 'x' for its tag tag:yaml.org,2002:float"),
    ("kind: FC", "kind: !!python/object:os.system FC", "kind: invalid YAML: could not determine a constructor"),
    ("  w: 8", "  w: !!binary x", "input_spec.w: invalid YAML: failed to decode base64 data"),
])
def test_tagged_values_are_errors_at_their_line(old, new, message):
    """Found by test_fuzz_mutated_archplan_yaml: a value its explicit tag cannot take (``!!int zero``)
    was a bare ``ValueError`` without a line, a tag the safe loader does not know
    (``!!python/object:...``) a PyYAML ``ConstructorError``. Both are ArchPlanYamlError at the line."""
    text = SEEDS["mlp_digits"]
    at = text.index(old)
    with pytest.raises(ArchPlanYamlError) as info:
        from_yaml(text[:at] + new + text[at + len(old):])
    assert info.value.line == text.count("\n", 0, at) + 1 and message in str(info.value), info.value


def test_a_character_yaml_refuses_names_its_line():
    """Found by test_fuzz_mutated_archplan_yaml: a NUL (or another character YAML does not allow)
    was an error without a line ("position 0" of PyYAML's ReaderError). Now line and column."""
    text = SEEDS["mlp_digits"]
    at = text.index("kind: FC")
    with pytest.raises(ArchPlanYamlError) as info:
        from_yaml(text[:at] + "\x00" + text[at:])
    assert info.value.line == text.count("\n", 0, at) + 1
    assert "character U+0000 at column 5 is not allowed" in str(info.value)
