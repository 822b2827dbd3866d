"""A tr-mlir plugin: ``conv -> relu`` (a convolution without batch norm) fused into ``arch.conv_relu``.

Load it with ``tr-opt --load-plugin examples/plugins/conv_relu.py``, ``tr-train --plugin ...`` or
``Task(..., plugins=["examples/plugins/conv_relu.py"])``. The walk-through is
``docs/fusion-tutorial.md``; ``lit_tests/plugins/arch_merge_conv_relu.mlir`` is its regression test.

One call registers the op (its properties are the conv's: ``out_ch``, ``k``, ``s``, ``p``,
``groups``), its layer descriptor (the conv's and the ReLU's composed, so it runs the existing
kernels and trains bit for bit like the unfused model), its ArchPlan YAML form, the pattern pass
``arch-merge-conv-relu`` and its place in ``arch-plan``: after ``arch-merge-triple``, so a conv
followed by a batch norm still becomes an ``arch.cbr``.
"""

from tr_mlir import extend
from tr_mlir.dialects import arch

ConvReluOp = extend.register_fused_chain(
    "arch.conv_relu",
    [arch.ConvOp, arch.ReluOp],
    layer_kind="ConvRelu",
    pass_name="arch-merge-conv-relu",
    after="arch-merge-triple",
)
