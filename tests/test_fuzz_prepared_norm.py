"""Fuzz: the prepared batch-norm launches (:mod:`tr_mlir.lowering.cpu._prepared_norm`) against the
kernel functions, on random cases: every BN training kernel, C from 1 to 1280, M = 1, split sizes
whose rows do not divide evenly, NaN / Inf / denormal / huge values, eps and momentum in every
form (including 0, negative, momentum above 1) and changed between two launches, the conv-fused
statistics with -0, NaN and negative ``sq_sum``, in-place y / dx / dskip, mask and output forms;
on 1 and 2 threads. The outputs must be the same bits, except that where both are NaN the NaN's
sign and payload may differ: NumPy's own ``rm += t`` keeps the first operand's NaN in its SIMD
lanes and the second's in its scalar tail, which no per-channel C loop can follow.

``TR_MLIR_FUZZ_EXAMPLES=N`` runs N cases per seed instead of :data:`EXAMPLES` (a failure names the
seed and case)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from tr_mlir.lowering.cpu import _cnorm, _prepared
from tr_mlir.lowering.cpu.registry import KERNELS, PreparedLaunch

F32 = np.float32
EXAMPLES = 100
"""Cases per seed in CI (under a second per seed)."""

CHANNELS = (1, 2, 3, 5, 17, 64, 161, 1280)
SPECIAL = (np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, 1e-40, 3e38, -3e38, 1e30)
FORWARD = ("bn2d_fwd", "bn2d_relu_fwd", "bn2d_add_relu_fwd")
BACKWARD = ("bn2d_bwd", "bn2d_relu_bwd", "bn2d_relu_bwd_from_output", "bn2d_add_relu_bwd",
            "bn2d_add_relu_bwd_from_output")


def _values(rng, shape, kind: int) -> np.ndarray:
    """fp32 values of ``shape``: normal (0), normal at a random scale from 1e-40 to 1e38 (1), far from
    0 (2), or denormals, zeros of both signs and ones (3); some of them replaced by :data:`SPECIAL`."""
    if kind == 0:
        a = rng.standard_normal(shape)
    elif kind == 1:
        a = rng.standard_normal(shape) * 10.0 ** rng.integers(-40, 38)
    elif kind == 2:
        a = rng.standard_normal(shape) + 10.0 ** rng.integers(0, 8)
    else:
        a = rng.choice(np.array([1e-42, -1e-42, 1e-39, 0.0, -0.0, 1.0]), shape)
    a = a.astype(F32)
    if rng.random() < 0.3 and a.size:
        flat = a.reshape(-1)
        for _ in range(rng.integers(1, 4)):
            flat[rng.integers(flat.size)] = rng.choice(SPECIAL)
    return a


def _scalar(rng, value: float):
    """A scalar operand in one of its forms: an fp32 or fp64 1-element array, a number, None."""
    return [np.array([value], F32), np.array([value], np.float64), float(value), None][rng.integers(4)]


def _shape(rng, big: bool) -> tuple[int, int, int, int]:
    """An NHWC shape: small (M = 1 in a fifth of them), or ``big``: at least
    :data:`._cnorm.SPLIT_ELEMENTS` elements (split among the threads) in rows that do not divide."""
    c = int(rng.choice(CHANNELS))
    if big:
        m = int(-(-_cnorm.SPLIT_ELEMENTS // c)) + int(rng.integers(0, 7))
        return (m, 1, 1, c) if rng.random() < 0.5 else (1, m, 1, c)
    n, h, w = (int(v) for v in rng.integers(1, 6, 3))
    if rng.random() < 0.2:
        n = h = w = 1
    return n, h, w, c


def _forward_case(rng, name: str, shape, kind) -> tuple[dict, dict]:
    c = shape[-1]
    a = {"x": _values(rng, shape, kind()), "gamma": _values(rng, c, kind()), "beta": _values(rng, c, kind()),
         "running_mean": _values(rng, c, kind()), "running_var": np.abs(_values(rng, c, kind())),
         "y": np.zeros(shape, F32), "save_mean": np.zeros(c, F32), "save_istd": np.zeros(c, F32),
         "eps": _scalar(rng, float(rng.choice([1e-5, 0.0, 1e-45, 1e-3, 1e10, 1e-300, -1e-5, -1.0]))),
         "momentum": _scalar(rng, float(rng.choice([0.1, 0.0, 1.0, 0.3, 1.5, -0.5, 1e-8])))}
    aliases = {}
    if rng.random() < 0.3:  # the conv-fused statistics, some of them impossible (negative, NaN)
        x2 = a["x"].reshape(-1, c).astype(np.float64)
        s, sq = x2.sum(0).astype(F32), ((x2 - x2.mean(0)) ** 2).sum(0).astype(F32)
        if rng.random() < 0.5:
            sq[rng.integers(c)] = rng.choice([-1.0, -0.0, np.nan, np.inf, 1e-45])
        a["sum"], a["sq_sum"] = s.reshape(1, 1, 1, c), sq.reshape(1, 1, 1, c)
    if name not in ("bn2d_fwd", "bn1d_fwd") and rng.random() < 0.6:
        a["mask"] = np.zeros(shape, np.int8)
    if name == "bn2d_add_relu_fwd":
        a["skip"] = _values(rng, shape, kind())
        if rng.random() < 0.2:
            aliases["y"] = "skip"
    if name in ("bn2d_fwd", "bn1d_fwd") and rng.random() < 0.3:
        aliases["y"] = "x"
    return a, aliases


def _backward_case(rng, name: str, shape, kind) -> tuple[dict, dict]:
    c = shape[-1]
    x = _values(rng, shape, kind())
    a = {"dy": _values(rng, shape, kind()), "x": x, "gamma": _values(rng, c, kind()),
         "save_mean": _values(rng, c, kind()), "save_istd": np.abs(_values(rng, c, kind())),
         "dgamma": np.zeros(c, F32), "dbeta": np.zeros(c, F32), "dx": np.zeros(shape, F32)}
    aliases = {}
    if rng.random() < 0.5:
        a["save_mean"] = x.reshape(-1, c).mean(0, dtype=np.float64).astype(F32)
    if "from_output" in name:
        a["y"] = np.where(rng.random(shape) > 0.4, rng.random(shape) + 0.5,
                          rng.choice([0.0, -0.0, np.nan], shape)).astype(F32)
    elif "relu" in name:
        a["mask"] = (rng.random(shape) > 0.4).astype(np.int8)
    if "add" in name:
        a["dskip"] = np.zeros(shape, F32)
        if rng.random() < 0.3:
            aliases["dskip"] = "dy"
    r = rng.random()
    if name in ("bn2d_bwd", "bn1d_bwd") and r < 0.2:
        a["dx"] = None
    elif r < 0.4:
        aliases["dx"] = "x"
    elif r < 0.6 and "dskip" not in aliases:
        aliases["dx"] = "dy"
    return a, aliases


def _case(rng) -> tuple[str, dict, dict]:
    """A random BN kernel call: its name, its arrays and which outputs share an input's buffer."""
    shape = _shape(rng, rng.random() < 0.08)
    name = str(rng.choice(FORWARD + BACKWARD))
    if shape[1:3] == (1, 1) and name in ("bn2d_fwd", "bn2d_bwd") and rng.random() < 0.5:
        name = name.replace("2d", "1d")

    def kind() -> int:
        return int(rng.integers(4))

    with np.errstate(all="ignore"):
        a, aliases = (_forward_case if "fwd" in name else _backward_case)(rng, name, shape, kind)
    return name, a, aliases


def _copy(a: dict, aliases: dict) -> dict:
    out = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in a.items()}
    out.update({k: out[v] for k, v in aliases.items()})
    return out


def _next_step(arrays: dict, how: tuple[float, float, float, float]) -> None:
    """Between the two launches: the inputs scaled and shifted, eps and momentum (given as arrays)
    set anew, gamma and the running variance halved."""
    for k in ("x", "dy", "skip", "sum", "sq_sum"):
        if isinstance(arrays.get(k), np.ndarray):
            arrays[k] *= F32(how[0])
            arrays[k] += F32(how[1])
    for k, v in (("eps", how[2]), ("momentum", how[3])):
        if isinstance(arrays.get(k), np.ndarray):
            arrays[k][...] = v
    for k in ("gamma", "running_var"):
        if k in arrays:
            arrays[k] *= F32(0.5)


def _run(name: str, a: dict, aliases: dict, threads: int, prepared: bool, how, monkeypatch) -> tuple[dict, bool]:
    """Two launches of ``name`` on a copy of ``a`` (:func:`_next_step` between them); the arrays,
    and whether the prepared call ran."""
    arrays = _copy(a, aliases)
    monkeypatch.setenv(_prepared.ENV_PREPARE, "1" if prepared else "0")
    launch = KERNELS[name].bind(arrays, {})
    with threadpool_limits(threads):
        launch()
        _next_step(arrays, how)
        launch()
    return arrays, isinstance(launch, PreparedLaunch) and launch.last_call is not launch.generic

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_prepared_bn_matches_the_kernel_function_on_random_cases(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    prepared = 0
    for it in range(int(os.environ.get("TR_MLIR_FUZZ_EXAMPLES", EXAMPLES))):
        name, a, aliases = _case(rng)
        how = (float(rng.choice([1.0, -2.0, 1e20])), float(rng.choice([0.25, 0.0, np.nan])),
               float(rng.choice([1e-5, 0.0, 2.0])), float(rng.choice([0.1, 0.0, 1.0])))
        for threads in (1, 2):
            with np.errstate(all="ignore"):
                got, used = _run(name, a, aliases, threads, True, how, monkeypatch)
                want, _ = _run(name, a, aliases, threads, False, how, monkeypatch)
            prepared += used
            for k in KERNELS[name].outputs:
                if not isinstance(want.get(k), np.ndarray) or got[k].tobytes() == want[k].tobytes():
                    continue
                same = got[k].dtype != np.int8 and np.array_equal(got[k], want[k], equal_nan=True)
                assert same, f"seed {seed} case {it}: {name} {a['x'].shape} on {threads} threads, {k} differs"
    if _cnorm._cc.available():
        assert prepared > 0
