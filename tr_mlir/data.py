"""Datasets for ``tr-train``: ``digits``, ``mnist``, ``cifar10`` and ``synthetic``.

:func:`load_dataset` is the one entry point; :data:`DATASETS` is the registry (name ->
:class:`DatasetSpec`). Every loader returns a :class:`Dataset`:

* images ``train_x``/``val_x``: NHWC ``float32`` arrays of shape ``(N, H, W, C)``, C-contiguous;
* labels ``train_y``/``val_y``: ``int64`` arrays of shape ``(N,)`` with values in
  ``0 .. num_classes-1`` (int64 as PyTorch's ``cross_entropy`` targets);
* pixel units: raw pixels are first scaled to ``[0, 1]`` (divided by the format's maximum:
  16 for digits, 255 for MNIST and CIFAR-10), then, unless ``normalize=False``, standardized per
  channel, ``x = (x - mean[c]) / std[c]``, with ``mean``/``std`` computed from the **train split
  only** (after any resizing/padding, so the model's input really is zero-mean, unit-variance on
  the train split; validation images use the same statistics). ``Dataset.mean``/``std`` keep
  the statistics in ``[0, 1]`` pixel units.

Validation split: datasets with a fixed test split (MNIST ``t10k-*``, CIFAR-10 ``test_batch``)
validate on it; the others (``digits``) hold out ``ceil(val_fraction * N)`` samples
(``val_fraction`` defaults to 0.2) chosen by a permutation from ``numpy.random.default_rng(seed)``,
so a given seed always gives the same split. Passing ``val_fraction`` explicitly for a dataset
with a test split holds out that fraction of the train split instead (the test split is unused).

Geometry: ``resize_to=(H, W)`` resizes bilinearly (half-pixel centers, no antialiasing: PyTorch's
``F.interpolate(mode="bilinear", align_corners=False)``); ``pad_to=(H, W)`` zero-pads centered
(the extra pixel of an odd margin goes bottom/right), e.g. MNIST 28x28 -> 32x32 for LeNet-5. The
padding is 0 in ``[0, 1]`` pixel units (black background), i.e. ``-mean/std`` after normalization.

Files: MNIST is read from the four standard IDX files (gzip or raw), CIFAR-10 from the python
pickle batches (``cifar-10-batches-py/``, or the ``cifar-10-python.tar.gz`` archive itself);
every file is checked (magic numbers, header sizes against file lengths, shapes, label ranges)
and any problem is a :class:`DatasetError` that names the file and says how to fix it. Only MNIST
downloads, and only when asked (``download=True``): from :data:`MNIST_MIRRORS` with a socket
timeout, checking the SHA-256 of each decompressed file. The default data folder (when
``data_dir`` is None) is ``$TR_MLIR_DATA_DIR/<name>``, else ``~/.cache/tr_mlir/<name>``.

Command line::

    python -m tr_mlir.data --list
    python -m tr_mlir.data mnist --data-dir DIR [--download] [--pad-to 32,32]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import http.client
import io
import math
import os
import pickle
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from tr_mlir.errors import TrMlirError

__all__ = [
    "DATASETS", "Batch", "Dataset", "DatasetError", "DatasetSpec", "MNIST_MIRRORS",
    "MNIST_SHA256", "default_data_dir", "download_mnist", "iterate_batches", "load_dataset", "resize_batch",
    "main", "num_batches", "read_idx",
]


class DatasetError(TrMlirError):
    """A dataset is missing, malformed or asked for with bad options; the message says what and
    how to fix it (command-line tools print it without a traceback)."""


@dataclass(frozen=True, eq=False)
class Dataset:
    """A loaded dataset, ready for training.

    ``train_x``/``val_x``: ``(N, H, W, C)`` float32 NHWC images, normalized as the module
    docstring says; ``train_y``/``val_y``: ``(N,)`` int64 labels in ``0 .. num_classes-1``;
    ``input_shape``: ``(H, W, C)``; ``mean``/``std``: the per-channel statistics of the train
    split in ``[0, 1]`` pixel units (``(0,)*C``/``(1,)*C`` when not normalized); ``val_source``:
    where the validation split comes from, in words.
    """

    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray
    num_classes: int
    input_shape: tuple[int, int, int]
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    class_names: tuple[str, ...] | None = None
    val_source: str = ""

    def __post_init__(self) -> None:
        for split, x, y in (("train", self.train_x, self.train_y), ("val", self.val_x, self.val_y)):
            if x.dtype != np.float32 or x.ndim != 4 or tuple(x.shape[1:]) != tuple(self.input_shape):
                raise DatasetError(f"{self.name}: {split}_x must be float32 (N, "
                                   f"{', '.join(map(str, self.input_shape))}), got {x.dtype} {x.shape}")
            if y.dtype != np.int64 or y.shape != (x.shape[0],):
                raise DatasetError(f"{self.name}: {split}_y must be int64 ({x.shape[0]},), "
                                   f"got {y.dtype} {y.shape}")

    @property
    def num_train(self) -> int:
        """Number of training samples."""
        return int(self.train_x.shape[0])

    @property
    def num_val(self) -> int:
        """Number of validation samples."""
        return int(self.val_x.shape[0])

    def describe(self) -> str:
        """One line for logs: sizes, shape, classes, split and normalization."""
        h, w, c = self.input_shape
        stats = ", ".join(f"{m:.4f}/{s:.4f}" for m, s in zip(self.mean, self.std))
        return (f"{self.name}: {self.num_train} train, {self.num_val} val ({self.val_source}), "
                f"{h}x{w}x{c}, {self.num_classes} classes, mean/std per channel {stats}")


class _Raw(NamedTuple):
    """What a loader returns: NHWC images in raw units (uint8 or float), labels, and facts."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray | None
    test_y: np.ndarray | None
    scale: float  # the raw maximum: divide by it to get [0, 1]
    num_classes: int
    class_names: tuple[str, ...] | None
    test_source: str = ""


@dataclass(frozen=True)
class DatasetSpec:
    """A registry entry: ``loader(data_dir, download=..., **options) -> _Raw``; ``options`` names
    the keyword options the loader accepts besides ``data_dir``/``download``."""

    name: str
    description: str
    loader: Callable[..., _Raw]
    uses_files: bool
    options: frozenset[str] = field(default_factory=frozenset)


def default_data_dir(name: str) -> Path:
    """``$TR_MLIR_DATA_DIR/<name>`` when that variable is set, else ``~/.cache/tr_mlir/<name>``."""
    root = os.environ.get("TR_MLIR_DATA_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "tr_mlir") / name


# ----------------------------------------------------------------------------- digits

DIGITS_FILE = Path("datasets") / "data" / "digits.csv.gz"
"""The digits as scikit-learn ships them, relative to its package folder (``load_digits`` reads it:
one row of 64 pixel values and the label per sample)."""


def _bundled_digits() -> tuple[np.ndarray, np.ndarray] | None:
    """(images (N, 8, 8) float64, labels) read from scikit-learn's :data:`DIGITS_FILE` as
    ``sklearn.datasets.load_digits`` reads it, without importing scikit-learn (about 1.4 s of
    imports, most of a short tr-train run's start); None when the file is not where it used to be."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("sklearn")  # finds the package folder, imports nothing
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(root) / DIGITS_FILE
        if path.is_file():
            try:
                with gzip.open(path, "rt", encoding="utf-8") as f:
                    data = np.loadtxt(f, delimiter=",")
            except (OSError, ValueError, EOFError, zlib.error):
                return None
            if data.ndim != 2 or data.shape[1] != 65:
                return None
            return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)
    return None


def _load_digits(data_dir: Path | None, *, download: bool = False) -> _Raw:
    bundled = _bundled_digits()
    if bundled is None:
        try:
            from sklearn.datasets import load_digits
        except ImportError as e:
            raise DatasetError("the digits dataset needs scikit-learn (it ships the data): "
                               "pip install scikit-learn") from e
        bunch = load_digits()
        bundled = bunch.images, bunch.target
    images = np.asarray(bundled[0])  # (1797, 8, 8) float64, integers 0..16
    if images.ndim != 3 or images.min() < 0 or images.max() > 16:
        raise DatasetError(f"digits: unexpected data from scikit-learn: shape {images.shape}")
    x = images.astype(np.uint8)[..., None]
    y = np.asarray(bundled[1], dtype=np.int64)
    return _Raw(x, y, None, None, 16.0, 10, tuple(str(i) for i in range(10)))


# ----------------------------------------------------------------------------- MNIST

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
"""The four MNIST files, without the ``.gz`` suffix."""

MNIST_MIRRORS = ("https://ossci-datasets.s3.amazonaws.com/mnist/",
                 "https://storage.googleapis.com/cvdf-datasets/mnist/")
"""Public mirrors of ``<file>.gz`` (the first is torchvision's), tried in order."""

MNIST_SHA256 = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
"""SHA-256 of each *decompressed* file (mirrors recompress; the IDX bytes are canonical: their
MD5s are LeCun's 6bbc9ace..., a25bea73..., 2646ac64..., 27ae3e4e...)."""

DOWNLOAD_TIMEOUT_S = 30.0
"""Socket timeout of each download request, in seconds."""

_IDX_MAGIC = {2051: ("images", 3), 2049: ("labels", 1)}  # IDX: 0x0000 08 (ubyte) ndim


def _read_file(path: Path) -> bytes:
    """The bytes of ``path``, gunzipped when the name ends in ``.gz``."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as e:
        raise DatasetError(f"{path}: cannot read ({e}); the file is damaged or truncated, "
                           "delete it and get it again") from e


def read_idx(path: Path | str, kind: str) -> np.ndarray:
    """Read one IDX file (``kind`` = ``"images"`` or ``"labels"``), gzip or raw.

    Returns uint8 ``(N, rows, cols)`` images or ``(N,)`` labels. Raises :class:`DatasetError`
    when the magic number is not 2051 (images) / 2049 (labels), or the file length differs from
    what the header says (a truncated file names the expected and actual byte counts).
    """
    path = Path(path)
    data = _read_file(path)
    expected_magic = {"images": 2051, "labels": 2049}[kind]
    ndim = _IDX_MAGIC[expected_magic][1]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DatasetError(f"{path}: truncated IDX {kind} file: expected at least {header} bytes "
                           f"of header, got {len(data)} bytes")
    magic = int.from_bytes(data[0:4], "big")
    if magic != expected_magic:
        raise DatasetError(f"{path}: not an IDX {kind} file: magic number {magic}, expected "
                           f"{expected_magic}")
    dims = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    expected = header + math.prod(dims)
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "has trailing bytes"
        shape = "x".join(map(str, dims))
        size = " (decompressed)" if path.suffix == ".gz" else ""
        raise DatasetError(f"{path}: {what}: header says {shape}, expected {expected} bytes, "
                           f"got {len(data)} bytes{size}; get the file again")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def _find_mnist(data_dir: Path) -> tuple[dict[str, Path], list[str]]:
    """The MNIST files present (stem -> path) under ``data_dir`` or its torchvision layout
    ``MNIST/raw``, raw file preferred to ``.gz``; and the stems missing."""
    found: dict[str, Path] = {}
    for stem in MNIST_FILES:
        for folder in (data_dir, data_dir / "MNIST" / "raw"):
            for name in (stem, stem + ".gz"):
                if (folder / name).is_file():
                    found[stem] = folder / name
                    break
            if stem in found:
                break
    return found, [s for s in MNIST_FILES if s not in found]


def download_mnist(data_dir: Path | str, *, timeout: float | None = None) -> list[Path]:
    """Download the MNIST files missing from ``data_dir`` (created if needed) as ``<stem>.gz``.

    Tries each of :data:`MNIST_MIRRORS` in order with a socket timeout of ``timeout`` seconds
    (default :data:`DOWNLOAD_TIMEOUT_S`); a file is kept only when the SHA-256 of its decompressed
    bytes matches :data:`MNIST_SHA256` (written to a temporary file, then renamed). Returns the
    paths written. Raises :class:`DatasetError` when a file cannot be had from any mirror.
    """
    data_dir = Path(data_dir)
    timeout = DOWNLOAD_TIMEOUT_S if timeout is None else timeout
    _, missing = _find_mnist(data_dir)
    written = []
    for stem in missing:
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DatasetError(f"cannot create {data_dir} for the MNIST download: {e}") from e
        failures = []
        for mirror in MNIST_MIRRORS:
            url = mirror + stem + ".gz"
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    blob = response.read()
                digest = hashlib.sha256(gzip.decompress(blob)).hexdigest()
            except (urllib.error.URLError, http.client.HTTPException, OSError, EOFError,
                    zlib.error, ValueError) as e:
                failures.append(f"{url}: {getattr(e, 'reason', None) or e}")
                continue
            if digest != MNIST_SHA256[stem]:
                failures.append(f"{url}: SHA-256 mismatch (got {digest}, expected "
                                f"{MNIST_SHA256[stem]})")
                continue
            target = data_dir / (stem + ".gz")
            try:
                with tempfile.NamedTemporaryFile(dir=data_dir, prefix=stem, delete=False) as tmp:
                    tmp.write(blob)
                os.replace(tmp.name, target)
            except OSError as e:
                raise DatasetError(f"cannot write {target}: {e}") from e
            written.append(target)
            break
        else:
            raise DatasetError(f"could not download {stem}.gz into {data_dir}: "
                               + "; ".join(failures) + ". Check the network, or download the "
                               f"four MNIST files by hand into {data_dir}")
    return written


def _load_mnist(data_dir: Path | None, *, download: bool = False) -> _Raw:
    data_dir = default_data_dir("mnist") if data_dir is None else Path(data_dir)
    if download:
        download_mnist(data_dir)
    found, missing = _find_mnist(data_dir)
    if missing:
        where = ("" if data_dir.is_dir() else " (a file, not a folder)" if data_dir.exists()
                 else " (no such folder)")
        raise DatasetError(
            f"MNIST files not found in {data_dir}{where}: expected "
            + ", ".join(s + ".gz" for s in missing) + " (gzip or uncompressed); download them from "
            f"{MNIST_MIRRORS[0]} into that folder, or pass --download (download=True)")
    splits = []
    for prefix in ("train", "t10k"):
        images_path = found[f"{prefix}-images-idx3-ubyte"]
        labels_path = found[f"{prefix}-labels-idx1-ubyte"]
        images = read_idx(images_path, "images")
        labels = read_idx(labels_path, "labels")
        if images.shape[0] != labels.shape[0]:
            raise DatasetError(f"{images_path} holds {images.shape[0]} images but {labels_path} "
                               f"holds {labels.shape[0]} labels; the files do not belong together")
        if labels.size and labels.max() > 9:
            bad = int(np.argmax(labels > 9))
            raise DatasetError(f"{labels_path}: label {int(labels[bad])} at index {bad} is out of "
                               "range 0..9")
        splits.append((images[..., None], labels.astype(np.int64), images_path))
    (tx, ty, tpath), (vx, vy, vpath) = splits
    if tx.shape[1:] != vx.shape[1:]:
        raise DatasetError(f"{tpath} has {tx.shape[1]}x{tx.shape[2]} images but {vpath} has "
                           f"{vx.shape[1]}x{vx.shape[2]}")
    if tx.shape[0] == 0:
        raise DatasetError(f"{tpath} holds no images")
    return _Raw(tx, ty, vx, vy, 255.0, 10, tuple(str(i) for i in range(10)),
                "the 10k test set" if vx.shape[0] == 10000 else "the t10k test set")


# ----------------------------------------------------------------------------- CIFAR-10

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck")

_PICKLE_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
}


class _SafeUnpickler(pickle.Unpickler):
    """Unpickles only plain containers and numpy arrays (a pickle can run code otherwise)."""

    def find_class(self, module: str, name: str):  # noqa: ANN201 - pickle's signature
        if (module, name) in _PICKLE_ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _cifar_batch(name: str, blob: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    """One pickled batch -> ``(N, 32, 32, 3)`` uint8 NHWC images and ``(N,)`` int64 labels."""
    try:
        batch = _SafeUnpickler(io.BytesIO(blob), encoding="bytes").load()
    except Exception as e:  # noqa: BLE001 - any unpickling failure means a bad file
        raise DatasetError(f"{where}: not a CIFAR-10 python batch ({e}); get {CIFAR10_URL} "
                           "again and extract it") from e
    if not isinstance(batch, dict):
        raise DatasetError(f"{where}: expected a dict with keys 'data' and 'labels', got "
                           f"{type(batch).__name__}")
    batch = {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}
    missing = [k for k in ("data", "labels") if k not in batch]
    if missing:
        raise DatasetError(f"{where}: missing key(s) {', '.join(missing)}; keys are "
                           f"{sorted(map(str, batch))}")
    data, labels = batch["data"], np.asarray(batch["labels"])
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 \
            or data.shape[1] != 3072:
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DatasetError(f"{where}: 'data' must be a uint8 array of shape (N, 3072) (10000 x "
                           f"3x32x32 planar RGB in the real files), got {got}")
    if labels.shape != (data.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise DatasetError(f"{where}: 'labels' must be {data.shape[0]} integers, got "
                           f"{labels.dtype} {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        bad = int(np.argmax((labels < 0) | (labels > 9)))
        raise DatasetError(f"{where}: label {int(labels[bad])} at index {bad} is out of range 0..9")
    # CHW planar (R plane, G plane, B plane, each row-major 32x32) -> NHWC
    images = np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return images, labels.astype(np.int64)


def _load_cifar10(data_dir: Path | None, *, download: bool = False) -> _Raw:
    data_dir = default_data_dir("cifar10") if data_dir is None else Path(data_dir)
    if download:
        raise DatasetError(f"cifar10 does not download; get {CIFAR10_URL} and extract it (or "
                           f"put the archive itself) into {data_dir}")
    names = CIFAR10_TRAIN + ("test_batch",)
    blobs: dict[str, tuple[bytes, str]] = {}
    folders = (data_dir / "cifar-10-batches-py", data_dir)
    present = {f: [n for n in names if (f / n).is_file()] for f in folders}
    best = max(folders, key=lambda f: len(present[f]))  # the first on a tie
    if len(present[best]) == len(names):
        blobs = {n: ((best / n).read_bytes(), str(best / n)) for n in names}
    archive = data_dir / "cifar-10-python.tar.gz"
    if not blobs and archive.is_file():
        try:
            with tarfile.open(archive, "r:gz") as tar:
                members = set(tar.getnames())
                lacking = [n for n in names if f"cifar-10-batches-py/{n}" not in members]
                if lacking:
                    raise DatasetError(f"{archive}: the archive lacks cifar-10-batches-py/"
                                       f"{', '.join(lacking)}; download {CIFAR10_URL} again")
                for n in names:
                    member = tar.extractfile(f"cifar-10-batches-py/{n}")
                    if member is None:
                        raise DatasetError(f"{archive}: cifar-10-batches-py/{n} is not a file")
                    blobs[n] = (member.read(), f"{archive}:cifar-10-batches-py/{n}")
        except (OSError, EOFError, tarfile.TarError, zlib.error) as e:
            raise DatasetError(f"{archive}: cannot read the archive ({e}); download {CIFAR10_URL} "
                               "again") from e
    if not blobs:
        where = f"{data_dir} or {folders[0]}" if not present[best] else str(best)
        missing = [n for n in names if n not in present[best]]
        raise DatasetError(f"CIFAR-10 batches not found in {where}: expected {', '.join(missing)}; "
                           f"download {CIFAR10_URL} and extract it into {data_dir}")
    train = [_cifar_batch(n, *blobs[n]) for n in CIFAR10_TRAIN]
    test_x, test_y = _cifar_batch("test_batch", *blobs["test_batch"])
    return _Raw(np.concatenate([b[0] for b in train]), np.concatenate([b[1] for b in train]),
                test_x, test_y, 255.0, 10, CIFAR10_CLASSES, "test_batch")


# ----------------------------------------------------------------------------- synthetic

def _load_synthetic(data_dir: Path | None, *, download: bool = False,
                    input_shape: Sequence[int] = (32, 32, 3), num_classes: int = 10,
                    train_size: int = 1024, val_size: int = 256, seed: int = 0) -> _Raw:
    shape = tuple(int(v) for v in input_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise DatasetError(f"synthetic: input_shape must be (H, W, C) of positive ints, got "
                           f"{tuple(input_shape)}")
    if num_classes < 1 or train_size < 1 or val_size < 1:
        raise DatasetError(f"synthetic: num_classes, train_size and val_size must be >= 1, got "
                           f"{num_classes}, {train_size}, {val_size}")
    rng = np.random.default_rng(seed)
    prototypes = rng.random((num_classes, *shape), dtype=np.float32)

    def make(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, num_classes, size=n, dtype=np.int64)
        x = rng.random((n, *shape), dtype=np.float32)
        x += prototypes[y]
        x *= 0.5
        return x, y

    tx, ty = make(train_size)
    vx, vy = make(val_size)
    return _Raw(tx, ty, vx, vy, 1.0, num_classes, None, "generated")


# ----------------------------------------------------------------------------- registry

DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec("digits", "8x8x1 handwritten digits bundled with scikit-learn (1797 samples, "
                    "offline); val = seeded 20% hold-out", _load_digits, False),
        DatasetSpec("mnist", "28x28x1 MNIST from the four IDX files in data_dir (gz or raw); "
                    "val = the 10k test set; download=True fetches them", _load_mnist, True),
        DatasetSpec("cifar10", "32x32x3 CIFAR-10 from the python batches in data_dir; val = "
                    "test_batch", _load_cifar10, True),
        DatasetSpec("synthetic", "random images of any shape (class prototypes plus uniform "
                    "noise, so it is learnable), seeded, for benchmarks", _load_synthetic, False,
                    frozenset({"input_shape", "num_classes", "train_size", "val_size", "seed"})),
    )
}


def _split(n: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded shuffled split of ``range(n)``: (train indices, val indices), each sorted."""
    if not 0.0 < val_fraction < 1.0:
        raise DatasetError(f"val_fraction must be in (0, 1), got {val_fraction}")
    n_val = math.ceil(val_fraction * n)
    if n_val >= n:
        raise DatasetError(f"val_fraction {val_fraction} leaves no training samples out of {n}")
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


def _size_pair(name: str, value: Sequence[int]) -> tuple[int, int]:
    pair = tuple(int(v) for v in value)
    if len(pair) != 2 or min(pair) < 1:
        raise DatasetError(f"{name} must be (H, W) of positive ints, got {tuple(value)}")
    return pair  # type: ignore[return-value]


def resize_batch(x: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Bilinear resize of a float32 NHWC batch ``x`` ``(N, H, W, C)`` to ``(N, size[0], size[1],
    C)`` (half-pixel centers, no antialiasing: PyTorch's ``interpolate(mode='bilinear',
    align_corners=False, antialias=False)``); progressive resizing (``Task(resize=...)``)."""
    return _resize_bilinear(x, size)


def _resize_bilinear(x: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Bilinear resize of float32 NHWC ``x`` to ``size`` (half-pixel centers, no antialiasing)."""
    def taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        src = np.maximum((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0.0)
        i0 = np.minimum(np.floor(src).astype(np.intp), n_in - 1)
        i1 = np.minimum(i0 + 1, n_in - 1)
        return i0, i1, (src - i0).astype(np.float32)

    (h0, h1, wh), (w0, w1, ww) = taps(x.shape[1], size[0]), taps(x.shape[2], size[1])
    out = np.empty((x.shape[0], *size, x.shape[3]), np.float32)
    for s in range(0, x.shape[0], 4096):  # chunks bound the temporaries
        c = x[s:s + 4096]
        rows = c[:, h0] * (1 - wh)[:, None, None] + c[:, h1] * wh[:, None, None]
        out[s:s + 4096] = rows[:, :, w0] * (1 - ww)[:, None] + rows[:, :, w1] * ww[:, None]
    return out


def _prepare(x: np.ndarray, scale: float, resize_to: tuple[int, int] | None,
             pad_to: tuple[int, int] | None) -> np.ndarray:
    """Raw NHWC -> float32 in [0, 1] units (x / scale, correctly rounded), resized then
    zero-padded centered."""
    n, h, w, c = x.shape
    if resize_to is None and pad_to is None:
        out = np.empty(x.shape, np.float32)
        np.divide(x, np.float32(scale), out=out, dtype=np.float32, casting="unsafe")
        return out
    if resize_to is not None:
        x = _resize_bilinear(_prepare(x, scale, None, None), resize_to)
        scale, (h, w) = 1.0, resize_to
    if pad_to is None:
        return x
    if pad_to[0] < h or pad_to[1] < w:
        raise DatasetError(f"cannot pad {h}x{w} images to {pad_to[0]}x{pad_to[1]}: pad_to must "
                           "be at least the image size (use resize_to to shrink)")
    top, left = (pad_to[0] - h) // 2, (pad_to[1] - w) // 2
    out = np.zeros((n, *pad_to, c), np.float32)
    np.divide(x, np.float32(scale), out=out[:, top:top + h, left:left + w],
                dtype=np.float32, casting="unsafe")
    return out


def _channel_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and population std of float32 NHWC ``x``, accumulated in float64."""
    total = np.zeros(x.shape[3]), np.zeros(x.shape[3])
    for s in range(0, x.shape[0], 4096):
        c = x[s:s + 4096].astype(np.float64)
        total[0][:] += c.sum(axis=(0, 1, 2))
        total[1][:] += np.square(c).sum(axis=(0, 1, 2))
    count = x.shape[0] * x.shape[1] * x.shape[2]
    mean = total[0] / count
    std = np.sqrt(np.maximum(total[1] / count - mean * mean, 0.0))
    return mean, np.where(std > 1e-12, std, 1.0)  # a constant channel is only centered


def load_dataset(name: str, data_dir: Path | str | None = None, *, seed: int = 0,
                 val_fraction: float | None = None, pad_to: Sequence[int] | None = None,
                 resize_to: Sequence[int] | None = None, normalize: bool = True,
                 download: bool = False, **options: object) -> Dataset:
    """Load dataset ``name`` from :data:`DATASETS` as a :class:`Dataset` (see the module docs).

    ``data_dir``: the folder holding the files (MNIST, CIFAR-10; default
    :func:`default_data_dir`); ``seed``: the split permutation (and, for ``synthetic``, the
    data); ``val_fraction``: the held-out fraction (default 0.2 where there is no test split; see
    the module docs); ``resize_to``/``pad_to``: ``(H, W)``; ``normalize``: per-channel
    standardization from the train split; ``download``: fetch missing MNIST files. ``options``
    go to the loader (``synthetic``: ``input_shape=(H, W, C)``, ``num_classes``, ``train_size``,
    ``val_size``). Raises :class:`DatasetError` for an unknown name or option, and for any
    missing or malformed file.
    """
    spec = DATASETS.get(name)
    if spec is None:
        raise DatasetError(f"unknown dataset '{name}'; available: {', '.join(DATASETS)}")
    unknown = sorted(set(options) - spec.options)
    if unknown:
        raise DatasetError(f"dataset '{name}' takes no option(s) {', '.join(unknown)}"
                           + (f"; it takes {', '.join(sorted(spec.options))}" if spec.options else ""))
    if "seed" in spec.options:
        options.setdefault("seed", seed)
    resize = None if resize_to is None else _size_pair("resize_to", resize_to)
    pad = None if pad_to is None else _size_pair("pad_to", pad_to)
    raw = spec.loader(None if data_dir is None else Path(data_dir), download=download, **options)
    train_x, train_y, val_x, val_y = raw.train_x, raw.train_y, raw.test_x, raw.test_y
    val_source = raw.test_source
    if val_x is None or val_fraction is not None:
        frac = 0.2 if val_fraction is None else val_fraction
        tr, va = _split(train_x.shape[0], frac, seed)
        train_x, train_y, val_x, val_y = train_x[tr], train_y[tr], train_x[va], train_y[va]
        val_source = f"{frac * 100:g}% of the train samples held out, seed {seed}"
    assert val_y is not None
    train_x = _prepare(train_x, raw.scale, resize, pad)
    val_x = _prepare(val_x, raw.scale, resize, pad)
    channels = train_x.shape[3]
    mean, std = np.zeros(channels), np.ones(channels)
    if normalize:
        mean, std = _channel_stats(train_x)
        for x in (train_x, val_x):
            x -= mean.astype(np.float32)
            x /= std.astype(np.float32)
    return Dataset(name, train_x, np.ascontiguousarray(train_y, np.int64), val_x,
                   np.ascontiguousarray(val_y, np.int64), raw.num_classes,
                   tuple(int(v) for v in train_x.shape[1:]),  # type: ignore[arg-type]
                   tuple(float(v) for v in mean), tuple(float(v) for v in std),
                   raw.class_names, val_source)


# ----------------------------------------------------------------------------- batches

class Batch(NamedTuple):
    """One mini-batch: ``x`` ``(B, H, W, C)`` float32, ``y`` ``(B,)`` int64, and ``size``, the
    number of real samples (``B`` except in a padded last batch, whose rows from ``size`` on
    are zeros / label 0 and must be masked out)."""

    x: np.ndarray
    y: np.ndarray
    size: int


def num_batches(n: int, batch_size: int, *, drop_last: bool = False) -> int:
    """How many batches :func:`iterate_batches` yields for ``n`` samples."""
    return n // batch_size if drop_last else -(-n // batch_size)


def iterate_batches(x: np.ndarray, y: np.ndarray, batch_size: int, *, shuffle: bool = False,
                    seed: int = 0, drop_last: bool = False,
                    pad_last: bool = False) -> Iterator[Batch]:
    """Mini-batches of ``(x, y)`` (``x`` ``(N, ...)``, ``y`` ``(N,)``) in order, or shuffled by a
    permutation from ``numpy.random.default_rng(seed)`` (pass e.g. ``seed + epoch`` for a new
    order each epoch).

    Memory: in order and without ``pad_last``, each batch is a **view** of ``x``/``y`` (no copy).
    Otherwise the samples are gathered into two buffers allocated once per call and **reused** by
    every batch: a batch is valid until the next one is requested (copy it to keep it).

    Tail: when ``N`` is not a multiple of ``batch_size``, the last batch has ``size < batch_size``
    real samples; ``drop_last`` skips it, ``pad_last`` returns it at the full ``batch_size``
    (rows from ``size`` on zeroed, for a runtime with a fixed batch), otherwise its arrays have
    ``size`` rows. Raises :class:`DatasetError` on bad sizes.
    """
    n = x.shape[0]
    if batch_size < 1:
        raise DatasetError(f"batch_size must be >= 1, got {batch_size}")
    if y.shape[0] != n:
        raise DatasetError(f"x has {n} samples but y has {y.shape[0]}")
    if drop_last and pad_last:
        raise DatasetError("drop_last and pad_last exclude each other")
    order = np.random.default_rng(seed).permutation(n) if shuffle else None
    if order is not None or pad_last:
        bx = np.empty((batch_size, *x.shape[1:]), x.dtype)
        by = np.empty((batch_size, *y.shape[1:]), y.dtype)
    for start in range(0, num_batches(n, batch_size, drop_last=drop_last) * batch_size,
                       batch_size):
        size = min(batch_size, n - start)
        if order is None and not pad_last:
            yield Batch(x[start:start + size], y[start:start + size], size)
            continue
        if order is not None:
            idx = order[start:start + size]
            np.take(x, idx, axis=0, out=bx[:size])
            np.take(y, idx, axis=0, out=by[:size])
        else:
            bx[:size] = x[start:start + size]
            by[:size] = y[start:start + size]
        if pad_last:
            bx[size:] = 0
            by[size:] = 0
            yield Batch(bx, by, size)
        else:
            yield Batch(bx[:size], by[:size], size)


# ----------------------------------------------------------------------------- command line

def _pair_arg(text: str) -> tuple[int, int]:
    try:
        h, w = (int(v) for v in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected H,W, got '{text}'") from None
    return h, w


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tr_mlir.data``: list the datasets, or load one (downloading it if asked) and
    print its summary. Returns the exit code (1 with a one-line error on a DatasetError)."""
    parser = argparse.ArgumentParser(prog="python -m tr_mlir.data", description=__doc__.split("\n")[0])
    parser.add_argument("dataset", nargs="?", help="dataset name (see --list)")
    parser.add_argument("--list", action="store_true", help="list the datasets and exit")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="folder holding the files (default: ~/.cache/tr_mlir/<name>)")
    parser.add_argument("--download", action="store_true", help="download missing MNIST files")
    parser.add_argument("--seed", type=int, default=0, help="split seed (default 0)")
    parser.add_argument("--val-fraction", type=float, default=None,
                        help="hold out this fraction of the train split (default: test split, or 0.2)")
    parser.add_argument("--pad-to", type=_pair_arg, default=None, metavar="H,W",
                        help="zero-pad the images, centered, to HxW")
    args = parser.parse_args(argv)
    if args.list or not args.dataset:
        for spec in DATASETS.values():
            print(f"{spec.name:10s} {spec.description}")
        return 0
    try:
        ds = load_dataset(args.dataset, args.data_dir, seed=args.seed,
                          val_fraction=args.val_fraction, pad_to=args.pad_to,
                          download=args.download)
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(ds.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
