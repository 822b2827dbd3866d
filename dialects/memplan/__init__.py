"""The ``memplan`` dialect: memory plans and computation graphs of a compiled network.

This is the output of the Compiler phases (DESIGN section 4, facts sheet sections 1-11). Everything
lives in one ``memplan.program for @model`` op (a symbol table) next to the ``arch.model`` it was compiled from:

* ``memplan.spec``: the compile spec (batch size per process, dataset sizes, resolutions, world size,
  optimizer, target);
* six ``memplan.variant`` ops (``train_base, train_last, train_lowres, train_lowres_last, val_base,
  val_last``): batch, resolution, max resolution, channels, amp, and, after phase 5, links to their
  plan and graphs;
* ``memplan.descs``: phase 1/2 per-layer tensor descriptors (shapes of all six variants, max slots);
* six ``memplan.plan`` ops (phase 3): the region table and the DTensor table;
* ``memplan.graph @train`` / ``@infer`` (phase 4): one ``memplan.nodes`` op per non-empty GraphId;
* ``memplan.atlas``: (variant, GraphId) -> capture key.

Encoding (DESIGN section 4): a plan or a graph is a few ops carrying dense arrays (ids, offsets,
sizes, shapes), never one op per tensor or node: xDSL parses about 800 ops/s but ~90k array
elements/s. Shapes are NHWC, four entries per tensor; regions and dtypes are spelled by name.

Verifiers check what a backend relies on: ids unique and dense, 256-aligned non-overlapping
offsets inside their region, contiguous regions in the fixed order, W/G/M/V/A element
correspondence (the k-th parameter of a W range sits at the same element offset in the G, M, V and
A ranges), node ids defined in the plans, valid RANGE spans, val variants without a train graph,
identical ids/slots/offsets in the six plans.
"""

from __future__ import annotations

from tr_mlir.dialects.memplan._graphs import (  # noqa: F401 (the dialect's public names)
    AtlasOp,
    GraphOp,
    Node,
    NodesOp,
    ProgramOp,
    SKIP_OUTPUTS,
)
from tr_mlir.dialects.memplan._plans import (  # noqa: F401 (the dialect's public names)
    DescsOp,
    DTensor,
    PlanOp,
    SpecOp,
    VariantOp,
    linear_layout,
)
from tr_mlir.dialects.memplan._vocab import (  # noqa: F401 (the dialect's public names)
    ALIGN,
    CORRESPONDING_SPANS,
    DTYPE_BYTES,
    INIT_RULES,
    NUM_GRAPH_IDS,
    NUM_REGIONS,
    RANGE_PREFIX,
    STATE_REGIONS,
    is_range_op,
    TRANSIENT_REGIONS,
    VARIANTS,
    WORKSPACE_PREFIX,
    GraphId,
    GraphIdAttr,
    MemRegion,
    OptimizerAttr,
    OptimizerKind,
    Target,
    TargetAttr,
    align256,
    channel_align,
    f64_array,
    i64_array,
    is_train_variant,
    region_enabled,
    slot_bytes,
    str_array,
)
from xdsl.ir import Dialect

Memplan = Dialect(
    "memplan",
    [ProgramOp, SpecOp, VariantOp, DescsOp, PlanOp, GraphOp, NodesOp, AtlasOp],
    [TargetAttr, OptimizerAttr, GraphIdAttr],
)
"""The ``memplan`` dialect object (registered by ``tr-opt`` and the ``xdsl.universe`` entry point)."""
