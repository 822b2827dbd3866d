"""Lowering of the memplan dialect to executables (NumPy backend now, CuPy later).

Modules:

* :mod:`.operands`: the one table mapping a graph node's positional operands to its kernel's
  named arguments (also read by the compiler to plan kernel workspaces);
* :mod:`.kernels`: the kernel library (registry ``KERNELS``, NumPy reference kernels);
* :mod:`.backend`: the ``Backend`` protocol (arena, views, host staging, kernel table, capture),
  the NumPy backend with closure-list capture, the arena memory check;
* :mod:`.executable`: memplan module -> ``Executable`` (arena, views, init rules, one captured
  graph per atlas key);
* :mod:`.runner`: the seed's step / epoch / validation order over the captured graphs.

Fused layers (cbr, cbrp, gap_fc, the residual blocks) run as the compiler composes them: the
layer descriptors emit the sub-layers' kernels over the block's own tensors
(:mod:`tr_mlir.passes._descriptors`), so the executable needs only the primitive kernels, plus
the fused batch-norm epilogues (BN + ReLU, BN + add + ReLU in one pass each way,
:mod:`tr_mlir.lowering.cpu.norm`), which do less memory traffic for the same bits: fused and
unfused compiles are the same arithmetic (they agree to the last bit in fp32 and AMP,
tests/test_runtime_torch.py), every sub-kernel's workspace is planned and visible in the graph,
and each kernel is ported to the GPU and tested against torch. (Whole-block kernels that ran the
same primitives one after another from one node did the same work and were removed.)
"""
