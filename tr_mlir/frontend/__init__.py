"""Frontends: networks written elsewhere, brought into the ``arch`` dialect.

:mod:`tr_mlir.frontend.torch` imports a PyTorch ``nn.Module`` (``from_torch``). PyTorch is an
optional dependency: importing :mod:`tr_mlir` or this package does not import ``torch``.
"""
