"""The CPU kernels: the NumPy reference implementation of every op (and compiled C for the hot cases), one table keyed by compute op.

:data:`KERNELS` maps every kernel family of the node-op vocabulary
(:class:`tr_mlir.dialects.kernels.KernelId`: snake_case, without precision: ``conv_fwd``,
``bn2d_bwd``, ``range_update_weight_momentum``, ...; the constants of ``K``) to a
:class:`KernelSpec`: the function, the roles of its array arguments (read, written, workspace,
optional), its static params and its workspace rule per target (:data:`TARGETS`: the CPU
function's, and the CUDA launcher's) for the planner. Precision follows
the dtypes of the bound arrays: fp32, or AMP (fp16 activations and AMP weight copies, fp32
accumulation in planned fp32 workspaces). Layouts: activations NHWC; conv weights KRSC
``(K, k, k, C/groups)``; FC weights ``(out, H*W*C)`` over the NHWC-flattened input (any shape of
that size); BN parameters and statistics C-element fp32.

Modules: :mod:`.conv`, :mod:`.norm` (batch norm), :mod:`.activation`, :mod:`.pool`,
:mod:`.dense` (FC, reshapes, add, copies), :mod:`.dropout`, :mod:`.loss` (softmax CE),
:mod:`.ranges` (range and scalar kernels),
:mod:`.optim` (optimizers). The registry itself is :mod:`.registry`.
"""

from tr_mlir.lowering.cpu import (  # noqa: F401  (each module registers its kernels)
    activation,
    conv,
    dense,
    dropout,
    loss,
    norm,
    optim,
    pool,
    ranges,
)
from tr_mlir.lowering.cpu._parallel import outside_kernels
from tr_mlir.lowering.cpu._prepared import begin_replay, end_replay, pinned_state, replay_plan
from tr_mlir.lowering.cpu.registry import (
    CPU,
    CUDA,
    KERNELS,
    TARGETS,
    ArrayInfo,
    KernelSpec,
    PreparedLaunch,
    kernel,
    kernel_name,
    lookup,
    register,
)

__all__ = ["CPU", "CUDA", "KERNELS", "TARGETS", "ArrayInfo", "KernelSpec", "PreparedLaunch", "begin_replay",
           "end_replay", "kernel", "kernel_name", "lookup", "outside_kernels", "pinned_state", "register",
           "replay_plan"]
