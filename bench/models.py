"""The benchmark's networks: BluePrints for tr-mlir and the same networks in PyTorch.

Throughput models (section 2 of ``bench/README.md``):

* ``mlp``: the seed's MLP 784-1024-512-256-10 (:func:`tr_mlir.zoo.mlp`), batch 200, 28x28x1;
* ``lenet5``: LeNet-5 with tanh (:func:`tr_mlir.zoo.lenet5`), batch 128, 32x32x1;
* ``resnet18_cifar``: the usual CIFAR ResNet-18 (He et al. 2015 widths 64..512, two basic blocks
  per stage, a 3x3 stride-1 stem without max pooling, as in most CIFAR-10 training code), batch
  64, 32x32x3. Built here; the zoo has only the ImageNet ResNet-18. ``resnet18_cifar_unfused``:
  the same network compiled with ``fuse=False`` (one arch op per conv, BN, ReLU and add);
* ``resnet50``: the zoo's ImageNet ResNet-50 (:func:`tr_mlir.zoo.resnet50`), batch 8, 224x224x3;
* ``mobilenet_v2``: the zoo's MobileNetV2 (:func:`tr_mlir.zoo.mobilenet_v2`, ImageNet strides)
  on a CIFAR-sized 32x32x3 input with 10 classes, batch 32 (its depthwise convs and 1x1
  expansions at small spatial sizes: the opposite end from ResNet-50's large GEMMs).

:func:`torch_model` builds the PyTorch twin of any BluePrint from the unfused fp32 ArchPlan (the
flat ``arch.model``), one ``torch.nn`` module per ``arch`` op class (:data:`TORCH_LAYERS`), so the
two sides run the same layers in the same order. The twin is written as a PyTorch user would write
it: NCHW tensors, torch's default initialization, and ``nn.Flatten`` in NCHW order where an FC
reads a spatial map (tr-mlir flattens NHWC; the FC weight is the same size either way).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.nn as nn

from tr_mlir import zoo
from tr_mlir.blueprint import BlockStyle as S
from tr_mlir.blueprint import Layer, block, cbr, gap_fc, repeat, seq


def resnet18_cifar(num_classes: int = 10) -> Layer:
    """CIFAR-style ResNet-18 for 32x32x3: cbr(64,3,1,1), basic blocks 2-2-2-2 of widths
    64..512 (the first block of stages 2-4 downsamples with a 1x1 projection), gap_fc."""
    layers: list[Layer] = [cbr(64, 3, 1, 1), repeat(block(64, S.RESNET_3_3), 2)]
    for width in (128, 256, 512):
        layers += [block(width, S.RESNET_3_3_DS), block(width, S.RESNET_3_3)]
    return seq(*layers, gap_fc(num_classes, True))


@dataclass(frozen=True)
class BenchModel:
    """A throughput model: its BluePrint builder, input (H, W, C), classes, batch size, and
    whether tr-mlir compiles it with the ArchPlan fusions (``fuse``; the PyTorch twin is the
    same either way)."""

    name: str
    builder: Callable[[int], Layer]
    input_shape: tuple[int, int, int]
    num_classes: int
    batch: int
    fuse: bool = True

    def blueprint(self) -> Layer:
        return self.builder(self.num_classes)


THROUGHPUT_MODELS: dict[str, BenchModel] = {
    m.name: m for m in (
        BenchModel("mlp", zoo.mlp, (28, 28, 1), 10, 200),
        BenchModel("lenet5", zoo.lenet5, (32, 32, 1), 10, 128),
        BenchModel("resnet18_cifar", resnet18_cifar, (32, 32, 3), 10, 64),
        BenchModel("resnet18_cifar_unfused", resnet18_cifar, (32, 32, 3), 10, 64, fuse=False),
        BenchModel("resnet50", zoo.resnet50, (224, 224, 3), 1000, 8),
        BenchModel("mobilenet_v2", zoo.mobilenet_v2, (32, 32, 3), 10, 32),
    )
}
"""Section 2's models with the issue's batch sizes."""

ZOO_MODELS: tuple[str, ...] = ("mlp", "lenet5", "vgg16_bn", "resnet18", "resnet34", "resnet50", "resnet101",
                               "resnet152", "mobilenet_v2")
"""Sections 1 and 3: the zoo models of the issue, in its order."""


def flat_plan(model: Layer, input_shape: tuple[int, int, int], num_classes: int):
    """The unfused fp32 ArchPlan ``arch.model`` of ``model`` (the layer list both sides run)."""
    from tr_mlir.compile import arch_plan
    from tr_mlir.dialects.arch import ModelOp

    module = arch_plan(model, input_shape, amp=False, fuse=False, num_classes=num_classes)
    return next(op for op in module.walk() if isinstance(op, ModelOp))


# --------------------------------------------------------------------------------------
# PyTorch twins
# --------------------------------------------------------------------------------------


def _torch_layers() -> dict[type, Callable[[Any, tuple[int, int, int]], Any]]:
    """arch op class -> ``fn(op, input (H, W, C)) -> torch.nn.Module`` (NCHW)."""
    from tr_mlir.dialects import arch as A

    def conv(op, hwc):
        p = op.params()
        return nn.Conv2d(hwc[2], p["out_ch"], p["k"], p.get("s", 1), p.get("p", 0), groups=p.get("groups", 1),
                         bias=False)

    def bn(op, hwc):
        p = op.params()
        return nn.BatchNorm2d(hwc[2], eps=p["eps"], momentum=p["momentum"])

    def bn1d(op, hwc):  # (N, C, 1, 1) features: per-channel statistics over N, as BatchNorm2d
        return bn(op, hwc)

    def pool(cls):
        return lambda op, hwc: cls(op.params()["k"], op.params()["s"], op.params().get("p", 0))

    def fc(op, hwc):
        h, w, c = hwc
        return nn.Sequential(nn.Flatten(), nn.Linear(h * w * c, op.params()["out_features"],
                                                     bias=bool(op.params().get("bias"))))

    table = {
        A.ConvOp: conv, A.Bn2dOp: bn, A.BnOp: bn, A.Bn1dOp: bn1d,
        A.MaxPoolOp: pool(nn.MaxPool2d), A.AvgPoolOp: pool(nn.AvgPool2d),
        A.GapOp: lambda op, hwc: nn.AdaptiveAvgPool2d(1),
        A.FcOp: fc,
        A.FlattenOp: lambda op, hwc: nn.Identity(),  # (N, C, H, W) stays; the FC flattens
        A.IdentityOp: lambda op, hwc: nn.Identity(),
        A.SoftmaxCeOp: lambda op, hwc: nn.Identity(),  # logits; the loss is F.cross_entropy
        A.DropoutOp: lambda op, hwc: nn.Dropout(op.params()["p"]),
        A.ReluOp: lambda op, hwc: nn.ReLU(), A.TanhOp: lambda op, hwc: nn.Tanh(),
        A.SiluOp: lambda op, hwc: nn.SiLU(), A.Relu6Op: lambda op, hwc: nn.ReLU6(),
        A.LeakyReluOp: lambda op, hwc: nn.LeakyReLU(), A.HardswishOp: lambda op, hwc: nn.Hardswish(),
        A.EluOp: lambda op, hwc: nn.ELU(), A.SigmoidOp: lambda op, hwc: nn.Sigmoid(),
    }
    return table


def torch_model(model: Layer, input_shape: tuple[int, int, int], num_classes: int):
    """The PyTorch twin of ``model`` (module doc): an ``nn.Module`` taking NCHW float32 input
    and returning logits. Raises ``KeyError`` naming an op without a torch layer."""
    return torch_model_from_plan(flat_plan(model, input_shape, num_classes))


def torch_model_from_plan(plan):
    """:func:`torch_model` from an already planned flat ``arch.model`` (:func:`flat_plan`)."""
    from tr_mlir.dialects import arch as A
    from tr_mlir.dialects.arch import static_hwc

    table = _torch_layers()
    block = plan.body.block
    index = {block.args[0]: 0}
    layers, wiring = [], []
    for op in block.ops:
        if isinstance(op, A.OutputOp):
            out = index[op.operands[0]]
            continue
        if isinstance(op, A.AddOp):
            wiring.append(("add", tuple(index[v] for v in op.operands)))
            layers.append(nn.Identity())
        else:
            make = table.get(type(op))
            if make is None:
                raise KeyError(f"no torch layer for '{op.name}' in bench.models")
            layers.append(make(op, static_hwc(op.operands[0].type)))
            wiring.append(("layer", (index[op.operands[0]],)))
        index[op.results[0]] = len(wiring)
    return Twin(layers, wiring, out)


class Twin(nn.Module):
    """A flat layer list with SSA wiring: value 0 is the input, value ``i + 1`` the ``i``-th
    op's result; ``("add", (a, b))`` adds two values, ``("layer", (a,))`` applies the layer."""

    def __init__(self, layers, wiring, out):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.wiring = wiring
        self.out = out

    def forward(self, x):
        vals = [x]
        for layer, (kind, args) in zip(self.layers, self.wiring):
            vals.append(vals[args[0]] + vals[args[1]] if kind == "add" else layer(vals[args[0]]))
        return vals[self.out]
