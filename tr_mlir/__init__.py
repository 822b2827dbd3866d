"""tr-mlir: a deep-learning training compiler built on xDSL.

A network written in the BluePrint DSL (:mod:`tr_mlir.blueprint`) is emitted into the
``arch`` dialect (:mod:`tr_mlir.dialects.arch`), normalized and fused by one rewrite pass
per ArchPlan step (:mod:`tr_mlir.passes`), planned into the ``memplan`` dialect and run by
a backend (:mod:`tr_mlir.lowering`). See ``docs/architecture.md``.
"""

import os as _os

# From a plain source checkout (or a regular install with the repository as the current
# directory) ``tr_mlir`` resolves to ./tr_mlir, which has no ``dialects``/``passes``/
# ``lowering`` inside: the top-level folders are mapped there by ``package-dir``. Extending
# ``__path__`` with the repository root makes ``tr_mlir.dialects`` resolve to ./dialects in
# that case too (see the xDSL field guide, section 8).
_repo_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_repo_root, "pyproject.toml")) and _os.path.isfile(
    _os.path.join(_repo_root, "dialects", "__init__.py")
):
    if _repo_root not in __path__:
        __path__.append(_repo_root)

__version__ = "0.1.0"

_LAZY = {"Task": ("tr_mlir.task", "Task"), "TaskError": ("tr_mlir.task", "TaskError"),
         "CrossEntropyLoss": ("tr_mlir.loss", "CrossEntropyLoss"),
         "optim": ("tr_mlir.optim", None), "sched": ("tr_mlir.sched", None)}


def __getattr__(name: str):
    """Lazy exports: ``tr_mlir.Task``, ``tr_mlir.TaskError``, ``tr_mlir.CrossEntropyLoss``,
    ``tr_mlir.optim``, ``tr_mlir.sched`` (imported on first use, so ``import tr_mlir`` stays light)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'tr_mlir' has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    mod = importlib.import_module(module)
    return mod if attr is None else getattr(mod, attr)
