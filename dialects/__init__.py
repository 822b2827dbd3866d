"""tr-mlir dialects, importable as ``tr_mlir.dialects``.

:func:`get_all_dialects` is the one registry of our dialects (name -> lazy factory, the
shape xDSL's own ``get_all_dialects`` and ``Universe`` use); ``tr-opt`` and the
``xdsl.universe`` entry point are derived from it.
"""

from collections.abc import Callable

from xdsl.ir import Dialect


def get_arch() -> Dialect:
    from tr_mlir.dialects.arch import arch_dialect

    return arch_dialect()


def get_memplan() -> Dialect:
    from tr_mlir.dialects.memplan import Memplan

    return Memplan


def get_all_dialects() -> dict[str, Callable[[], Dialect]]:
    """Dialect name -> factory returning the ``Dialect`` object (imported lazily)."""
    return {
        "arch": get_arch,
        "memplan": get_memplan,
    }
