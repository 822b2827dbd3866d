"""Capture and replay of the CUDA backend, checked on the CPU emulator.

The executable builds every atlas key's graph through :meth:`CudaBackend.capture` over
:class:`~tr_mlir.lowering.cuda.emulator.EmulatedDevice`, whose capture records instead of running
and enforces the CUDA-graph rules (no host access to device memory, no allocation, every pointer
in the arena, arguments matching the kernels); replays run the record with the recorded arguments,
as a CUDA graph does, so a value read on the host at capture time would be frozen and show up as a
wrong result. On top of that:

* whole training runs through :class:`tr_mlir.Task` (several models, fp32 and AMP, SGD / Adam /
  LARS, fused and unfused, dropout, a learning-rate schedule) agree with the NumPy backend (Adam
  with a large ``eps``: with the default 1e-8 it turns near-zero gradients, whose sign is
  rounding noise, into full steps, in either backend);
* an AMP overflow is skipped and halves the loss scale on the device, as on the CPU;
* the transfer graphs (host-to-device copies) are the only ones that wait for completion;
* replays allocate nothing;
* a kernel wrapper that touches device memory from the host, allocates, or points outside the
  arena during capture is refused with a clear error.
"""

from __future__ import annotations

import numpy as np
import pytest

import tr_mlir
from tr_mlir.blueprint import Dropout, Fc, Relu, Seq
from tr_mlir.lowering.cuda import emulator as emu

pytestmark = pytest.mark.skipif(emu.host_compiler() is None, reason="no host C++ compiler for the kernel emulator")


def _backend(**kw):
    from tr_mlir.lowering.cuda.backend import CudaBackend

    return CudaBackend(emu.EmulatedDevice(**kw))


def _data(shape, n=32, k=10, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, *shape)).astype(np.float32), rng.integers(0, k, n)


def _run(model, shape, device, *, amp=False, fuse=False, optimizer=None, scheduler=None, steps=3):
    x, y = _data(shape)
    task = tr_mlir.Task(model, shape, 10, batch_size=16, amp=amp, fuse=fuse, device=device, seed=3,
                        optimizer=optimizer or tr_mlir.optim.SGD(lr=0.05, momentum=0.9, weight_decay=5e-4),
                        scheduler=scheduler)
    task.compile(32, 32)
    losses = [task.train_step(x[16 * (i % 2):16 * (i % 2) + 16], y[16 * (i % 2):16 * (i % 2) + 16])
              for i in range(steps)]
    hist = task.fit((x, y), (x, y), epochs=1, shuffle=True)
    ev = task.evaluate(x, y)
    return task, losses, dict(task.parameters()), dict(task.buffers()), ev, task.predict(x[:7]), hist


CONFIGS = [
    ("resnet_tiny sgd", "resnet_tiny", (8, 8, 1), {}),
    ("resnet_tiny fused amp", "resnet_tiny", (8, 8, 1), {"amp": True, "fuse": True}),
    ("resnet_tiny 6x10 non-square", "resnet_tiny", (6, 10, 1), {}),
    ("depthwise_tiny adam", "depthwise_tiny", (8, 8, 1), {"optimizer": tr_mlir.optim.Adam(lr=1e-3, eps=1e-3, weight_decay=1e-4)}),
    ("depthwise_tiny amp", "depthwise_tiny", (8, 8, 1), {"amp": True}),
    ("lenet5 lars", "lenet5", (32, 32, 1), {"optimizer": tr_mlir.optim.LARS(lr=0.1, momentum=0.9, weight_decay=1e-4)}),
    ("mlp dropout adamw cosine", Seq((Fc(32, True), Relu(), Dropout(0.3), Fc(10, True))), (8, 8, 1),
     {"optimizer": tr_mlir.optim.AdamW(lr=1e-2, eps=1e-3, weight_decay=1e-2),
      "scheduler": tr_mlir.sched.CosineAnnealingLR(T_max=2)}),
]


@pytest.mark.parametrize("label,model,shape,kw", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_training_matches_the_cpu_backend(label, model, shape, kw):
    cpu = _run(model, shape, "cpu", **kw)
    gpu = _run(model, shape, _backend(), **kw)
    assert gpu[0].device == "gpu" and gpu[0].exe.backend.name == "cuda"
    tol = 3e-3 if kw.get("amp") else 2e-5
    np.testing.assert_allclose(gpu[1], cpu[1], rtol=tol, atol=tol)
    for name, p in cpu[2].items():
        np.testing.assert_allclose(gpu[2][name], p, rtol=tol, atol=tol, err_msg=name)
    for name, b in cpu[3].items():
        np.testing.assert_allclose(gpu[3][name], b, rtol=tol, atol=tol, err_msg=name)
    for k in ("loss", "top1", "top5"):
        assert gpu[4][k] == pytest.approx(cpu[4][k], rel=tol, abs=tol)
    np.testing.assert_allclose(gpu[5], cpu[5], rtol=tol, atol=tol)
    assert gpu[6][0]["train_loss"] == pytest.approx(cpu[6][0]["train_loss"], rel=tol, abs=tol)


def test_amp_overflow_is_skipped_on_the_device_like_the_cpu():
    x, y = _data((8, 8, 1), 16)
    x[0, 0, 0, 0] = 1e5  # beyond fp16: inf in the input, non-finite gradients
    out = {}
    for dev in ("cpu", _backend()):
        task = tr_mlir.Task("resnet_tiny", (8, 8, 1), 10, batch_size=16, amp=True, device=dev)
        task.compile(16, 16)
        before = dict(task.parameters())
        task.train_step(x, y)
        out[task.device] = (task.loss_scale, before, dict(task.parameters()), task.exe.get_scalar("has_nan"))
    assert out["gpu"][0] == out["cpu"][0] == 4096.0
    assert out["gpu"][3] == out["cpu"][3] == 1.0
    for name, p in out["gpu"][1].items():
        np.testing.assert_array_equal(out["gpu"][2][name], p, err_msg=name)


def test_graphs_are_recorded_transfers_wait_and_replays_allocate_nothing():
    backend = _backend()
    task = tr_mlir.Task("resnet_tiny", (8, 8, 1), 10, batch_size=16, device=backend)
    task.compile(32, 32)
    exe, dev = task.exe, backend.device
    kinds = {op.kind for g in exe.captured for op in g.graph.ops}
    assert kinds <= {"kernel", "memcpy", "memset"} and "kernel" in kinds
    waits = [g for g in exe.captured if g.sync_after]
    assert waits and all(any(op.kind == "memcpy" for op in g.graph.ops) for g in waits)
    assert len(waits) < len(exe.captured) / 2
    x, y = _data((8, 8, 1), 32)
    task.fit((x, y), epochs=1)
    allocations, launches = dev.allocations, dev.launches
    task.fit((x, y), epochs=1)
    assert dev.allocations == allocations and dev.launches > launches


def test_host_access_during_capture_is_refused():
    backend = _backend()
    arena = backend.allocate(1024)
    v = backend.view(arena, 0, np.float32, (4,))
    for bad in (lambda: float(v[0]), lambda: v.fill(1.0), lambda: np.add(v, 1, out=v), lambda: v.__setitem__(0, 2.0),
                lambda: backend.to_host(v)):
        with pytest.raises(emu.HostSyncError, match="capturing"):
            backend.capture([bad])
    assert not backend.device.capturing


def test_allocation_during_capture_is_refused():
    backend = _backend()
    with pytest.raises(emu.CaptureAllocationError, match="during graph capture"):
        backend.capture([lambda: backend.allocate(64) if backend.device.capturing else None])


def test_a_pointer_outside_the_arena_is_refused():
    backend = _backend()
    backend.allocate(1024)
    host = np.zeros(16, np.float32)
    spec = backend.kernels["relu_inf"]
    with pytest.raises(emu.LaunchError, match="outside the device arena"):
        backend.capture([spec.bind({"x": host, "y": host})])


def test_replay_reads_device_scalars_not_capture_time_values():
    backend = _backend()
    arena = backend.allocate(4096)
    view = lambda off, n, dt=np.float32: backend.view(arena, off, dt, (n,))  # noqa: E731
    w, g, lr = view(0, 8), view(256, 8), view(512, 1)
    w[...] = 1.0
    g[...] = 1.0
    lr[...] = 0.5
    graph = backend.capture([backend.kernels["range_update_weight_sgd"].bind(
        {"w": w, "g": g, "lr": lr, "weight_decay": view(768, 1)})])
    # the warm-up of capture() ran once: w = 0.5; now replay with a new learning rate
    lr[...] = 0.25
    graph.replay()
    np.testing.assert_allclose(backend.to_host(w), 0.25)


def test_device_choice_errors_without_a_gpu():
    from tr_mlir.lowering.cuda.backend import cuda_available

    if cuda_available()[0]:
        pytest.skip("a GPU is present")
    with pytest.raises(tr_mlir.TaskError, match="needs a CUDA GPU"):
        tr_mlir.Task("mlp_digits", (8, 8, 1), 10, batch_size=4, device="gpu")
    assert tr_mlir.Task("mlp_digits", (8, 8, 1), 10, batch_size=4, device="auto").device == "cpu"
