"""The model zoo: reference networks written in the BluePrint DSL.

:data:`MODELS` is the one registry (name -> :class:`ModelSpec`); the command line, the
``examples/*.mlir`` files and the tests are derived from it. Each builder takes
``num_classes`` and returns a :class:`~tr_mlir.blueprint.Layer`; the spec adds the default
input shape (H, W, C) and number of classes.

Command line::

    python -m tr_mlir.zoo --list
    python -m tr_mlir.zoo resnet50 [--num-classes N] [--input H,W,C] [--amp] [--fuse]
    python -m tr_mlir.zoo --write-examples examples      # examples/<name>.mlir for every model

Sources: ``mlp``, ``lenet5``, ``resnet18``, ``resnet50`` and the MobileNetV2 blocks are the
seed's reference models (facts sheet section 7); ``resnet34/101/152``, ``vgg16_bn`` and
``mobilenet_v2`` follow the published architectures (He et al. 2015, Simonyan & Zisserman
2014 with batch norm as in torchvision, Sandler et al. 2018) in the seed's idiom: ResNet
stages as ``block``/``repeat``, MobileNetV2 as ``mbconv`` (its blocks use ReLU, as the seed's
do, and its head is ``gap_fc`` without torchvision's dropout).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from tr_mlir.blueprint import (
    BlockStyle,
    BluePrintError,
    BluePrintTypeError,
    Layer,
    add2,
    block,
    bn,
    cbr,
    cbrp,
    conv,
    conv_dw,
    dropout,
    emit,
    fc,
    flatten,
    gap,
    gap_fc,
    identity,
    maxpool,
    mbconv,
    relu,
    repeat,
    seq,
    tanh_act,
)

__all__ = [
    "MODELS", "ModelSpec", "emit_model", "example_text", "main",
    "mlp", "mlp_digits", "lenet5", "vgg16_bn", "resnet18", "resnet34", "resnet50", "resnet101",
    "resnet152", "resnet_bottleneck_manual", "mobilenet_v2", "resnet_tiny", "resnet8_cifar",
    "mobilenet_tiny", "depthwise_tiny",
]

S = BlockStyle


def _repeat_or_one(layer: Layer, times: int) -> Layer | None:
    """``layer`` ``times`` times: ``None`` for 0, the layer itself for 1, else ``repeat``."""
    if times == 0:
        return None
    return layer if times == 1 else repeat(layer, times)


# --------------------------------------------------------------------------------------
# Fully connected and plain CNNs
# --------------------------------------------------------------------------------------


def mlp(num_classes: int = 10) -> Layer:
    """The seed's MLP (facts 7(b)): 1024-512-256 ReLU MLP, for 28x28x1 MNIST."""
    return seq(fc(1024, True), relu(), fc(512, True), relu(), fc(256, True), relu(),
               fc(num_classes, True))


def mlp_digits(num_classes: int = 10) -> Layer:
    """A small 64-32 ReLU MLP for 8x8x1 digits (sklearn's ``load_digits``)."""
    return seq(fc(64, True), relu(), fc(32, True), relu(), fc(num_classes, True))


def lenet5(num_classes: int = 10) -> Layer:
    """LeNet-5 with tanh (facts 7(d)), for 32x32x1; the first fc reads the 5x5x16 map."""
    return seq(conv(6, 5), tanh_act(), maxpool(2, 2, 0), conv(16, 5), tanh_act(), maxpool(2, 2, 0),
               fc(120, True), tanh_act(), fc(84, True), tanh_act(), fc(num_classes, True))


_VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


def vgg16_bn(num_classes: int = 1000) -> Layer:
    """VGG-16 with batch norm (configuration D), for 224x224x3.

    Thirteen conv3x3(p1) + bn + relu, five maxpool(2, 2, 0), then flatten, two fc-4096 with
    ReLU and dropout(0.5), and the classifier (torchvision's ``vgg16_bn`` at 224x224).
    """
    features: list[Layer] = []
    for v in _VGG16:
        if v == "M":
            features.append(maxpool(2, 2, 0))
        else:
            features += [conv(v, 3, 1, 1), bn(), relu()]
    return seq(*features, flatten(), fc(4096, True), relu(), dropout(0.5), fc(4096, True), relu(),
               dropout(0.5), fc(num_classes, True))


# --------------------------------------------------------------------------------------
# ResNets
# --------------------------------------------------------------------------------------


def _basic_resnet(stages: Sequence[int], num_classes: int) -> Layer:
    """ResNet with basic blocks (facts 7(d)): stem cbr(64,7,2,3) + maxpool(3,2,1), four stages
    of widths 64..512 (the first block of stages 2-4 downsamples), gap_fc."""
    layers: list[Layer | None] = [cbr(64, 7, 2, 3), maxpool(3, 2, 1)]
    for i, (width, n) in enumerate(zip((64, 128, 256, 512), stages)):
        if i == 0:
            layers.append(_repeat_or_one(block(width, S.RESNET_3_3), n))
        else:
            layers += [block(width, S.RESNET_3_3_DS), _repeat_or_one(block(width, S.RESNET_3_3), n - 1)]
    return seq(*[x for x in layers if x is not None], gap_fc(num_classes, True))


def _bottleneck_resnet(stages: Sequence[int], num_classes: int) -> Layer:
    """ResNet with bottleneck blocks (facts 7(a)): stem cbrp(64,7,2,3,3,2,1), four stages of
    bottleneck widths 64..512 (outputs 4x), the first block of stages 2-4 downsampling, gap_fc."""
    layers: list[Layer | None] = [cbrp(64, 7, 2, 3, 3, 2, 1)]
    for i, (mid, n) in enumerate(zip((64, 128, 256, 512), stages)):
        out = 4 * mid
        if i == 0:
            layers.append(_repeat_or_one(block(mid, out, S.RESNET_1_3_1), n))
        else:
            layers += [block(mid, out, S.RESNET_1_3_1_DS), _repeat_or_one(block(mid, out, S.RESNET_1_3_1), n - 1)]
    return seq(*[x for x in layers if x is not None], gap_fc(num_classes, True))


def resnet18(num_classes: int = 1000) -> Layer:
    """ResNet-18 (basic blocks 2-2-2-2), for 224x224x3."""
    return _basic_resnet((2, 2, 2, 2), num_classes)


def resnet34(num_classes: int = 1000) -> Layer:
    """ResNet-34 (basic blocks 3-4-6-3), for 224x224x3."""
    return _basic_resnet((3, 4, 6, 3), num_classes)


def resnet50(num_classes: int = 1000) -> Layer:
    """ResNet-50 (bottlenecks 3-4-6-3), exactly the seed's test model (facts 7(a)), 224x224x3."""
    return _bottleneck_resnet((3, 4, 6, 3), num_classes)


def resnet101(num_classes: int = 1000) -> Layer:
    """ResNet-101 (bottlenecks 3-4-23-3), for 224x224x3."""
    return _bottleneck_resnet((3, 4, 23, 3), num_classes)


def resnet152(num_classes: int = 1000) -> Layer:
    """ResNet-152 (bottlenecks 3-8-36-3), for 224x224x3."""
    return _bottleneck_resnet((3, 8, 36, 3), num_classes)


def _bottleneck(mid: int, out: int, downsample: bool, project: bool) -> Layer:
    """Facts 7(c)'s ``bneck``: a bottleneck written with seq/add2/conv/bn/relu."""
    s = 2 if downsample else 1
    shortcut = seq(conv(out, 1, s, 0), bn()) if project else identity()
    main = seq(conv(mid, 1), bn(), relu(), conv(mid, 3, s, 1), bn(), relu(), conv(out, 1), bn())
    return seq(add2(shortcut, main), relu())


def resnet_bottleneck_manual(num_classes: int = 1000) -> Layer:
    """Facts 7(c): three hand-written bottlenecks (projection, identity, downsampling) with
    add2/conv/bn/relu after a conv/bn/relu/maxpool stem, then gap and fc; 224x224x3."""
    return seq(conv(64, 7, 2, 3), bn(), relu(), maxpool(3, 2, 1),
               _bottleneck(64, 256, False, True), _bottleneck(64, 256, False, False),
               _bottleneck(128, 512, True, True), gap(), fc(num_classes, True))


# --------------------------------------------------------------------------------------
# MobileNetV2
# --------------------------------------------------------------------------------------

_MOBILENET_V2 = (  # expansion t, output channels c, repetitions n, first stride s
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def mobilenet_v2(num_classes: int = 1000) -> Layer:
    """MobileNetV2 (width 1.0), for 224x224x3: cbr(32,3,2,1), the 17 inverted residuals of
    the paper's table as ``mbconv`` (expansions 1 and 6 only, as the seed), cbr(1280,1,1,0),
    gap_fc."""
    layers: list[Layer | None] = [cbr(32, 3, 2, 1)]
    for t, c, n, s in _MOBILENET_V2:
        layers += [mbconv(t, c, s), _repeat_or_one(mbconv(t, c, 1), n - 1)]
    layers += [cbr(1280, 1, 1, 0), gap_fc(num_classes, True)]
    return seq(*[x for x in layers if x is not None])


# --------------------------------------------------------------------------------------
# Small models (tests, demos)
# --------------------------------------------------------------------------------------


def resnet_tiny(num_classes: int = 10) -> Layer:
    """A small residual CNN for 8x8x1 digits: cbr(16,3,1,1), a basic block, a downsampling
    basic block to 32 channels (4x4), gap_fc."""
    return seq(cbr(16, 3, 1, 1), block(16, S.RESNET_3_3), block(32, S.RESNET_3_3_DS),
               gap_fc(num_classes, True))


def resnet8_cifar(num_classes: int = 10) -> Layer:
    """ResNet-8 for 32x32x3 (CIFAR-10): cbr(16,3,1,1), basic blocks 16, 32/2, 64/2 (8x8), gap_fc."""
    return seq(cbr(16, 3, 1, 1), block(16, S.RESNET_3_3), block(32, S.RESNET_3_3_DS),
               block(64, S.RESNET_3_3_DS), gap_fc(num_classes, True))


def mobilenet_tiny(num_classes: int = 10) -> Layer:
    """A small MobileNetV2 for 32x32x3: cbr(16,3,1,1), inverted residuals (1,16,1), (6,24,2),
    (6,24,1) (identity shortcut), (6,32,2), cbr(64,1,1,0), gap_fc."""
    return seq(cbr(16, 3, 1, 1), mbconv(1, 16, 1), mbconv(6, 24, 2), mbconv(6, 24, 1),
               mbconv(6, 32, 2), cbr(64, 1, 1, 0), gap_fc(num_classes, True))


def _separable(out_ch: int, s: int) -> Layer:
    return seq(conv_dw(3, s, 1), bn(), relu(), conv(out_ch, 1), bn(), relu())


def depthwise_tiny(num_classes: int = 10) -> Layer:
    """A MobileNetV1-style net for 8x8x1 digits: cbr(16,3,1,1), two depthwise-separable
    blocks (conv_dw + bn + relu + 1x1 conv + bn + relu; 16->32, 32->64 at stride 2), gap_fc."""
    return seq(cbr(16, 3, 1, 1), _separable(32, 1), _separable(64, 2), gap_fc(num_classes, True))


# --------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """A zoo entry: ``builder(num_classes)`` returns the BluePrint; ``input_shape`` is the
    default (H, W, C) of one sample, ``num_classes`` the default class count."""

    name: str
    builder: Callable[[int], Layer]
    input_shape: tuple[int, int, int]
    num_classes: int
    description: str

    def blueprint(self, num_classes: int | None = None) -> Layer:
        """The model's layer tree for ``num_classes`` (default: the spec's).

        Raises :class:`~tr_mlir.blueprint.BluePrintError` unless ``num_classes`` is an int >= 1.
        """
        if num_classes is None:
            num_classes = self.num_classes
        if isinstance(num_classes, bool) or not isinstance(num_classes, int):
            raise BluePrintTypeError(f"{self.name}: num_classes must be an int, got {num_classes!r}")
        if num_classes < 1:
            raise BluePrintError(f"{self.name}: num_classes must be >= 1, got {num_classes}")
        return self.builder(num_classes)

    def emit(self, *, num_classes: int | None = None, input_shape: tuple[int, int, int] | None = None,
             amp: bool = False, fuse: bool = False) -> ModuleOp:
        """The model emitted in tree form as ``arch.model @<name>`` (see ``blueprint.emit``)."""
        n = self.num_classes if num_classes is None else num_classes
        return emit(self.blueprint(n), self.input_shape if input_shape is None else input_shape,
                    num_classes=n, amp=amp, fuse=fuse, name=self.name)


def _spec(builder: Callable[[int], Layer], input_shape: tuple[int, int, int], num_classes: int,
          description: str) -> ModelSpec:
    return ModelSpec(builder.__name__, builder, input_shape, num_classes, description)


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        _spec(mlp, (28, 28, 1), 10, "the seed's MLP 1024-512-256 (facts 7(b)), MNIST"),
        _spec(mlp_digits, (8, 8, 1), 10, "small MLP 64-32 for 8x8 digits"),
        _spec(lenet5, (32, 32, 1), 10, "LeNet-5 with tanh (facts 7(d))"),
        _spec(vgg16_bn, (224, 224, 3), 1000, "VGG-16 with batch norm"),
        _spec(resnet18, (224, 224, 3), 1000, "ResNet-18, basic blocks 2-2-2-2 (facts 7(d))"),
        _spec(resnet34, (224, 224, 3), 1000, "ResNet-34, basic blocks 3-4-6-3"),
        _spec(resnet50, (224, 224, 3), 1000, "ResNet-50, bottlenecks 3-4-6-3 (facts 7(a))"),
        _spec(resnet101, (224, 224, 3), 1000, "ResNet-101, bottlenecks 3-4-23-3"),
        _spec(resnet152, (224, 224, 3), 1000, "ResNet-152, bottlenecks 3-8-36-3"),
        _spec(resnet_bottleneck_manual, (224, 224, 3), 1000,
              "three bottlenecks written with add2/conv/bn/relu (facts 7(c))"),
        _spec(mobilenet_v2, (224, 224, 3), 1000, "MobileNetV2 (width 1.0) with mbconv blocks"),
        _spec(resnet_tiny, (8, 8, 1), 10, "small residual CNN (cbr, 2 basic blocks) for 8x8 digits"),
        _spec(resnet8_cifar, (32, 32, 3), 10, "ResNet-8 (3 basic blocks) for CIFAR-10"),
        _spec(mobilenet_tiny, (32, 32, 3), 10, "small MobileNetV2 (4 mbconv blocks) for CIFAR-10"),
        _spec(depthwise_tiny, (8, 8, 1), 10, "depthwise-separable CNN (conv_dw) for 8x8 digits"),
    )
}
"""Every zoo model by name."""


def _lookup(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise BluePrintError(f"unknown model '{name}'; known models: {', '.join(MODELS)}") from None


def emit_model(name: str, *, num_classes: int | None = None, input_shape: tuple[int, int, int] | None = None,
               amp: bool = False, fuse: bool = False) -> ModuleOp:
    """Emit zoo model ``name`` (defaults from its :class:`ModelSpec`, overridable).

    Raises :class:`~tr_mlir.blueprint.BluePrintError` for an unknown name or a bad override.
    """
    return _lookup(name).emit(num_classes=num_classes, input_shape=input_shape, amp=amp, fuse=fuse)


def example_text(name: str) -> str:
    """The contents of ``examples/<name>.mlir``: a header comment and the emitted module."""
    spec = _lookup(name)
    h, w, c = spec.input_shape
    header = (
        f"// {name}: {spec.description}\n"
        f"// Input {h}x{w}x{c}, {spec.num_classes} classes. Generated by "
        f"`python -m tr_mlir.zoo --write-examples examples` (make examples); do not edit.\n"
    )
    return header + str(spec.emit()) + "\n"


def _parse_hwc(text: str) -> tuple[int, int, int]:
    parts = text.replace("x", ",").split(",")
    try:
        h, w, c = (int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected H,W,C (three integers), got '{text}'") from None
    return (h, w, c)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tr_mlir.zoo``: print a zoo model's IR, list the zoo, or write the examples.

    Returns the exit status (0 ok, 1 bad model or argument, 2 usage error).
    """
    ap = argparse.ArgumentParser(prog="python -m tr_mlir.zoo",
                                 description="Emit a zoo model as arch IR (tree form).")
    ap.add_argument("name", nargs="?", help="model name (see --list)")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--write-examples", metavar="DIR", help="write DIR/<name>.mlir for every model")
    ap.add_argument("--num-classes", type=int, help="number of classes (default: the model's)")
    ap.add_argument("--input", type=_parse_hwc, metavar="H,W,C", help="input shape (default: the model's)")
    ap.add_argument("--amp", action="store_true", help="record amp on the model")
    ap.add_argument("--fuse", action="store_true", help="record fuse on the model")
    args = ap.parse_args(argv)
    if sum(bool(x) for x in (args.name, args.list, args.write_examples)) != 1:
        ap.error("give exactly one of NAME, --list, --write-examples")
    try:
        if args.list:
            width = max(map(len, MODELS))
            for spec in MODELS.values():
                h, w, c = spec.input_shape
                shape = f"{h}x{w}x{c}"
                print(f"{spec.name:<{width}}  {shape:<9}  {spec.num_classes:>4}  {spec.description}")
        elif args.write_examples:
            out = Path(args.write_examples)
            out.mkdir(parents=True, exist_ok=True)
            for name in MODELS:
                (out / f"{name}.mlir").write_text(example_text(name))
            print(f"wrote {len(MODELS)} examples to {out}", file=sys.stderr)
        else:
            print(emit_model(args.name, num_classes=args.num_classes, input_shape=args.input,
                             amp=args.amp, fuse=args.fuse))
    except (BluePrintError, OSError) as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
