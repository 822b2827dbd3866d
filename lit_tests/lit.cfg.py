"""lit configuration of the tr-mlir FileCheck suite (run: ``.venv/bin/lit -sv lit_tests``).

Tests are ``*.mlir`` files (``Inputs`` folders hold their helper files and are not tests).
RUN lines see the ``bin`` folder of the Python that runs lit first on PATH, so ``tr-opt``,
``filecheck`` and ``xdsl-opt`` resolve to that venv even when it is not activated.
Substitutions: ``FileCheck`` -> ``filecheck`` (the Python port), ``%plugins`` -> the example
plugins folder (``examples/plugins``, loaded with ``tr-opt --load-plugin %plugins/FILE.py``), ``TR_ROUNDTRIP`` (print
generic, re-parse, print custom, FileCheck against the file) and ``TR_GENERIC_ROUNDTRIP``
(the same, checked with the ``CHECK-GENERIC`` prefix on the generic form). Temporaries
(``%t``) go under ``<repo>/lit_out`` (or ``$TR_LIT_OUT``). With psutil installed each test
gets a time limit (``$TR_LIT_TIMEOUT`` seconds, default 120).
"""

import os
import shutil
import sys

import lit.formats

config.name = "tr-mlir"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["Inputs", "lit.cfg.py"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = os.environ.get(
    "TR_LIT_OUT", os.path.join(os.path.dirname(config.test_source_root), "lit_out")
)

bin_dir = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join(
    [bin_dir, config.environment.get("PATH", os.environ.get("PATH", ""))]
)
# a traceback switch set in the caller's shell must not change what the tests see
config.environment.pop("TR_OPT_TRACEBACK", None)

# a plugin (tr_mlir.extend) may import modules found through PYTHONPATH: lit's sandbox drops it
for var in ("PYTHONPATH", "TR_MLIR_PLUGINS"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

config.substitutions.append(("FileCheck", "filecheck"))
# %plugins: the example plugins (examples/plugins, docs/fusion-tutorial.md)
config.substitutions.append(
    ("%plugins", os.path.join(os.path.dirname(config.test_source_root), "examples", "plugins"))
)
config.substitutions.append(
    (
        "TR_ROUNDTRIP",
        "tr-opt %s --split-input-file --print-op-generic | tr-opt --split-input-file | filecheck %s",
    )
)
config.substitutions.append(
    (
        "TR_GENERIC_ROUNDTRIP",
        "tr-opt %s --split-input-file --print-op-generic | tr-opt --split-input-file "
        "--print-op-generic | filecheck %s --check-prefix=CHECK-GENERIC",
    )
)

try:
    import psutil  # noqa: F401  (lit's per-test timeout needs it)
except ImportError:
    pass
else:
    timeout = int(os.environ.get("TR_LIT_TIMEOUT", "120"))
    if hasattr(config, "maxIndividualTestTime"):  # lit >= 19: per config
        config.maxIndividualTestTime = timeout
    else:  # older lit: global
        lit_config.maxIndividualTestTime = timeout

missing = [t for t in ("tr-opt", "filecheck") if shutil.which(t, path=config.environment["PATH"]) is None]
if missing:
    lit_config.fatal(f"tools not found next to {sys.executable}: {missing} (run `make test` to set up .venv)")
