"""The training loop's device side: which captured graphs run, in which order (facts sheet section 13).

:class:`Runner` drives an :class:`~tr_mlir.lowering.executable.Executable` through the seed's
``run_train_epoch`` / ``run_val_epoch`` sequencing; the host side (data order, learning-rate
schedule, metrics) belongs to the caller (:class:`tr_mlir.Task`).

Training epoch over the variant pair ``(train_base, train_last)`` (``(train_lowres,
train_lowres_last)`` at the end resolution):

* before the first batch: the batch goes into host staging zone A and ``TRANSFER_A`` copies it
  into the input buffers; AMP: ``CAST_MAIN_FP32_TO_FP16`` (fp16 working weights);
  ``CLEAR_METRICS``;
* batch ``b`` (buffer A for even ``b``, B for odd), the last one with the ``*_last`` variant: the
  host writes the learning rate and the batch's row count (``local_batch_size``: the CPU path
  writes its batch size per step, facts 13); ``ZERO_GRAD``; ``FIRST_LAYER_FWD_{A|B}`` (label copy
  and first layer); the next batch is staged into the other zone and ``TRANSFER_{B|A}`` copies it
  (on a GPU this overlaps the deep graph); ``DEEP_FWD_BWD``; ``FIRST_LAYER_BWD_{A|B}``;
  ``CAST_DEEP_GRAD_FP16_TO_FP32``; ``DEEP_COMM``; ``CAST_FIRST_GRAD_FP16_TO_FP32``; ``FIRST_COMM``;
  ``ACCUM_METRICS`` (``_TRAIN_LAST`` on the last batch); ``NAN_CHECK_AND_GRAD_SCALING``;
  ``STATS_COMM``; ``UPDATE_STATS``; ``OPTIMIZER`` and the three ``LARS_*_OPT`` graphs;
  ``CAST_MAIN_FP32_TO_FP16``; after the last batch ``UPDATE_BN_INF_PARAMS``.

AMP loss scaling happens on the device: the NaN check sets ``has_nan`` from the fp32 gradients,
``RANGE_GRAD_SCALING`` halves ``scaling`` (floor 1, no growth: the seed's rule, facts 12.4,
starting from the plan's 8192), and every optimizer kernel skips the update while ``has_nan`` is
set. There is no host branch.

Validation over ``(val_base, val_last)``: ``CLEAR_METRICS``; per batch, staging, ``TRANSFER``,
``INF_MAIN_{A|B}``, ``ACCUM_METRICS`` (``_VAL_LAST`` for a last batch of the compiled size);
``VAL_RESULT_COMM``. A batch with fewer rows than the variant's batch (an arbitrary-size
evaluation's tail) is padded with zeros and runs the full-batch variant with ``local_batch_size``
= its row count: the loss and metric kernels ignore the padding rows (inference is per sample).
Graph launches that a variant lacks (AMP casts in fp32, LARS graphs for SGD, ...) are skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from tr_mlir.dialects.lifetimes import after_deep
from tr_mlir.dialects.memplan import GraphId
from tr_mlir.lowering.executable import Executable
from tr_mlir.lowering.operands import operands_for

G = GraphId

TRAIN_BASE, TRAIN_LAST, TRAIN_LOWRES, TRAIN_LOWRES_LAST, VAL_BASE, VAL_LAST = range(6)
"""Variant indices (the seed's fixed order)."""

_AB = ("a", "b")
_FIRST_FWD = {"a": G.FIRST_LAYER_FWD_A, "b": G.FIRST_LAYER_FWD_B}
_FIRST_BWD = {"a": G.FIRST_LAYER_BWD_A, "b": G.FIRST_LAYER_BWD_B}
_TRANSFER = {"a": G.TRANSFER_A, "b": G.TRANSFER_B}
_INF = {"a": G.INF_MAIN_A, "b": G.INF_MAIN_B}
_INF_EMA = {"a": G.INF_EMA_A, "b": G.INF_EMA_B}


@dataclass(frozen=True)
class Metrics:
    """Sums over samples of one pass (``loss * rows`` etc., as the seed's accumulators) and the
    sample count; ``loss``, ``top1``, ``top5`` are the means."""

    loss_sum: float
    top1_sum: float
    top5_sum: float
    samples: int

    @property
    def loss(self) -> float:
        return self.loss_sum / self.samples if self.samples else float("nan")

    @property
    def top1(self) -> float:
        return self.top1_sum / self.samples if self.samples else float("nan")

    @property
    def top5(self) -> float:
        return self.top5_sum / self.samples if self.samples else float("nan")


class Runner:
    """Facts-13 sequencing of one :class:`Executable` (module doc). Every launch list is
    precomputed once; a step replays them."""

    def __init__(self, exe: Executable):
        self.exe = exe
        self.batch = [v.batch_size for v in exe.variants]
        self._buffer = 0  # the input buffer the next standalone step uses (A/B alternate)
        s = exe.sequence
        self._pre = {(v, ab): s(v, (G.ZERO_GRAD, _FIRST_FWD[ab])) for v in range(4) for ab in _AB}
        self._post = {(v, ab, last): s(v, after_deep(ab, last)) for v in range(4) for ab in _AB
                      for last in (False, True)}
        self._transfer = {ab: s(TRAIN_BASE, (_TRANSFER[ab],)) for ab in _AB}
        self._infer = {(v, ab): s(v, (_INF[ab],)) for v in (VAL_BASE, VAL_LAST) for ab in _AB}
        self._infer_ema = {(v, ab): s(v, (_INF_EMA[ab],)) for v in (VAL_BASE, VAL_LAST) for ab in _AB}
        self._cast_ema = s(TRAIN_BASE, (G.CAST_EMA_FP32_TO_FP16,))
        self.has_ema = exe.has("ema_decay")
        """Whether the plan holds an EMA of the weights (:mod:`tr_mlir.ema`)."""
        self._accum_val = {VAL_BASE: s(VAL_BASE, (G.ACCUM_METRICS,)),
                           VAL_LAST: s(VAL_LAST, (G.ACCUM_METRICS_VAL_LAST,))}
        self._cast_main = s(TRAIN_BASE, (G.CAST_MAIN_FP32_TO_FP16,))
        self._clear = s(TRAIN_BASE, (G.CLEAR_METRICS,))
        self._val_comm = s(VAL_BASE, (G.VAL_RESULT_COMM,))
        self._bn_inf = s(TRAIN_BASE, (G.UPDATE_BN_INF_PARAMS,))
        self._lr = exe.scalar("lr")
        self._rows = exe.scalar("local_batch_size")
        self._stage_cache: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._probs = self._find_output(G.INF_MAIN_A, "probs")
        self._pinned = None  # the launch state of the step being replayed (_pinned_step), or None
        self.before_step: Callable[[], None] | None = None
        """Called before every optimizer step (the EMA decay of the step, :mod:`tr_mlir.ema`)."""
        self.after_step: Callable[[], None] | None = None
        """Called after every optimizer step (the host side of a loss-scale rule, :mod:`tr_mlir.amp`)."""

    # -- staging -------------------------------------------------------------------------

    def _find_output(self, gid: GraphId, arg: str) -> int | None:
        """The DTensor id bound to kernel argument ``arg`` in the infer graph's bucket ``gid``."""
        for graph in self.exe.graphs.values():
            for node in graph.nodes(gid):
                try:
                    named, _ = operands_for(node.op).named(node.inputs, node.outputs, {}, node.op)
                except (KeyError, ValueError):
                    continue
                if arg in named:
                    return int(named[arg])
        return None

    def stage(self, ab: str, variant: int, x: np.ndarray, y: np.ndarray | None) -> int:
        """Write a batch into host staging zone ``ab`` laid out for ``variant``; returns its rows.

        ``x`` (rows, H, W, c) float32 with rows <= the variant's batch and c <= its channels (the
        extra channels stay zero: AMP alignment); ``y`` (rows,) int labels or None (zeros). Rows
        beyond ``rows`` are zeroed. Allocation-free after the first call of a shape."""
        rows, c = x.shape[0], x.shape[-1]
        key = (ab, variant, rows, c)
        views = self._stage_cache.get(key)
        if views is None:
            data = self.exe.host_view(f"data_{ab}", variant)
            label = self.exe.host_view(f"label_{ab}", variant).reshape(-1)
            views = self._stage_cache[key] = (data[:rows, ..., :c], data[rows:], label[:rows], label[rows:])
        dst, data_pad, lab, lab_pad = views
        np.copyto(dst, x, casting="same_kind")
        if data_pad.size:
            data_pad.fill(0)
        if y is None:
            lab.fill(0)
        else:
            np.copyto(lab, y, casting="unsafe")
        if lab_pad.size:
            lab_pad.fill(0)
        return rows

    def _replay(self, graphs) -> None:
        state = self._pinned
        if state is None:
            for g in graphs:
                g.replay()
        else:  # inside _pinned_step: the step's launch state, one pin for all its graphs
            for g in graphs:
                g.replay_in(state)

    def _pinned_step(self, body: Callable[[], None]) -> None:
        """Run ``body`` (a step's or an evaluation batch's replays) with the backend's launch
        state pinned once for all of them where the backend has ``begin_step`` / ``end_step``
        (the CPU backend, whose graphs then replay with ``replay_in``), else as it is."""
        begin = getattr(self.exe.backend, "begin_step", None)
        if begin is None:
            body()
            return
        try:
            self._pinned = begin()
            body()
        finally:
            self._pinned = None
            self.exe.backend.end_step()

    # -- training -----------------------------------------------------------------------

    def prepare_weights(self) -> None:
        """AMP: ``CAST_MAIN_FP32_TO_FP16`` (fp16 working weights from the fp32 masters; after
        loading parameters). A no-op in fp32."""
        self._replay(self._cast_main)

    def _step(self, variant: int, ab: str, last: bool, lr: float, rows: int,
              prefetch: Callable[[str], None] | None = None) -> None:
        self._lr[0] = lr
        self._rows[0] = rows
        if self.before_step is not None:
            self.before_step()

        def replays() -> None:
            self._replay(self._pre[(variant, ab)])
            if prefetch is not None:
                prefetch("b" if ab == "a" else "a")
            self._replay(self._post[(variant, ab, last)])

        self._pinned_step(replays)
        if self.after_step is not None:
            self.after_step()

    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        """One optimizer step on a full batch (``train_base``), alternating the input buffers;
        returns the batch loss. BN inference parameters are not refreshed (:meth:`refresh_bn`)."""
        ab = _AB[self._buffer]
        self._buffer ^= 1
        rows = self.stage(ab, TRAIN_BASE, x, y)
        self._replay(self._transfer[ab])
        self._step(TRAIN_BASE, ab, False, lr, rows)
        return self.exe.get_scalar("loss")

    def train_epoch(self, batches: Iterable[tuple[np.ndarray, np.ndarray]], num_batches: int,
                    lr: Callable[[int], float], *, lowres: bool = False) -> Metrics:
        """One training epoch (module doc) over ``num_batches`` batches of ``(x, y)``: all but the
        last of the compiled batch size, the last of the compiled last-batch size. ``lr(b)`` is
        the learning rate of batch ``b``. Returns the epoch's training metrics."""
        v_base, v_last = (TRAIN_LOWRES, TRAIN_LOWRES_LAST) if lowres else (TRAIN_BASE, TRAIN_LAST)
        it: Iterator = iter(batches)
        first = next(it, None)
        if first is None or num_batches < 1:
            raise ValueError("expected at least one batch")
        rows = [0, 0]
        variant_of = (lambda b: v_last if b == num_batches - 1 else v_base)
        rows[0] = self.stage("a", variant_of(0), *first)
        self._replay(self._transfer["a"])
        self._replay(self._cast_main)
        self._replay(self._clear)
        samples = 0
        for b in range(num_batches):
            ab = _AB[b % 2]
            last = b == num_batches - 1
            v = variant_of(b)
            if rows[b % 2] != self.batch[v]:
                raise ValueError(f"batch {b} has {rows[b % 2]} samples, variant {v} expects {self.batch[v]}")

            def prefetch(other: str, b: int = b) -> None:
                if b + 1 < num_batches:
                    nxt = next(it, None)
                    if nxt is None:
                        raise ValueError(f"expected {num_batches} batches, got {b + 1}")
                    rows[(b + 1) % 2] = self.stage(other, variant_of(b + 1), *nxt)
                    self._replay(self._transfer[other])

            self._step(v, ab, last, lr(b), rows[b % 2], prefetch)
            samples += rows[b % 2]
        self._buffer = 0
        self._rows[0] = self.batch[TRAIN_BASE]
        return self.metrics(samples)

    def metrics(self, samples: int) -> Metrics:
        """The accumulated metrics (``accum_*`` scalars) over ``samples`` samples."""
        g = self.exe.get_scalar
        return Metrics(g("accum_loss"), g("accum_top1"), g("accum_top5"), samples)

    def refresh_bn(self) -> None:
        """``UPDATE_BN_INF_PARAMS``: fold the running statistics into the inference scale/bias."""
        self._replay(self._bn_inf)

    # -- inference ----------------------------------------------------------------------

    def _inference(self, x: np.ndarray, y: np.ndarray | None, sink: Callable[[int, int, int], None] | None,
                   ema: bool = False) -> Metrics:
        n = x.shape[0]
        if ema and not self.has_ema:
            raise ValueError("the plan holds no EMA (compile with ema)")
        infer = self._infer_ema if ema else self._infer
        if ema:
            self._replay(self._cast_ema)
        bv, lv = self.batch[VAL_BASE], self.batch[VAL_LAST]
        self._replay(self._clear)
        start, b = 0, 0
        while start < n:
            rows = min(bv, n - start)
            v = VAL_LAST if rows == lv and rows < bv and start + rows == n else VAL_BASE
            ab = _AB[b % 2]
            self.stage(ab, v, x[start:start + rows], None if y is None else y[start:start + rows])
            self._rows[0] = rows
            self._pinned_step(lambda ab=ab, v=v: (self._replay(self._transfer[ab]), self._replay(infer[(v, ab)]),
                                                  self._replay(self._accum_val[v] if y is not None else ())))
            if sink is not None:
                sink(v, start, rows)
            start += rows
            b += 1
        self._replay(self._val_comm)
        self._rows[0] = self.batch[TRAIN_BASE]
        return self.metrics(n)

    def evaluate(self, x: np.ndarray, y: np.ndarray, ema: bool = False) -> Metrics:
        """Loss, top-1, top-5 of the inference graph over any number of samples (module doc);
        ``ema``: of the EMA model (``CAST_EMA_FP32_TO_FP16`` once, then ``INF_EMA_{A|B}``)."""
        return self._inference(x, y, None, ema)

    def predict(self, x: np.ndarray, ema: bool = False) -> np.ndarray:
        """Softmax probabilities ``(N, num_classes)`` float32 of the inference graph (``ema``: of
        the EMA model)."""
        if self._probs is None:
            raise ValueError("the inference graph computes no probabilities")
        k = self.exe.tensors[self._probs].shape[-1]
        out = np.empty((x.shape[0], k), np.float32)

        def sink(v: int, start: int, rows: int) -> None:
            probs = self.exe.view(self._probs, v).reshape(-1, k)
            out[start:start + rows] = self.exe.to_host(probs[:rows])

        self._inference(x, None, sink, ema)
        return out
