"""Tests of tr_mlir.data: loaders on small generated files, validation errors, splits,
normalization, padding/resizing, the batch iterator, the MNIST download (against a local HTTP
server), and the real MNIST files when ``../shared/data/mnist`` exists beside the checkout."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import pickle
import socket
import tarfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tr_mlir import data
from tr_mlir.data import (
    DATASETS,
    Dataset,
    DatasetError,
    iterate_batches,
    load_dataset,
    num_batches,
    read_idx,
)

REAL_MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist"


# ----------------------------------------------------------------------------- helpers

def idx_bytes(arr: np.ndarray, magic: int | None = None) -> bytes:
    """An IDX file (ubyte) holding ``arr``; ``magic`` overrides the right one."""
    if magic is None:
        magic = 0x0800 + arr.ndim
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in arr.shape)
    return header + np.ascontiguousarray(arr, np.uint8).tobytes()


def write(path: Path, blob: bytes, gz: bool) -> Path:
    path = path.with_name(path.name + ".gz") if gz else path
    path.write_bytes(gzip.compress(blob) if gz else blob)
    return path


def mnist_arrays(n_train=6, n_test=4, rows=4, cols=5, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n_train, rows, cols), dtype=np.uint8),
            rng.integers(0, 10, n_train, dtype=np.uint8),
            rng.integers(0, 256, (n_test, rows, cols), dtype=np.uint8),
            rng.integers(0, 10, n_test, dtype=np.uint8))


def make_mnist(folder: Path, arrays=None, gz=True) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    arrays = mnist_arrays() if arrays is None else arrays
    return {stem: write(folder / stem, idx_bytes(arr), gz)
            for stem, arr in zip(data.MNIST_FILES, arrays)}


def cifar_batch(n: int, seed: int, str_keys=False, **override) -> bytes:
    rng = np.random.default_rng(seed)
    batch = {b"batch_label": b"test", b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
             b"labels": [int(v) for v in rng.integers(0, 10, n)]}
    batch.update({k.encode(): v for k, v in override.items()})
    if str_keys:
        batch = {k.decode(): v for k, v in batch.items()}
    return pickle.dumps(batch, protocol=2)


def make_cifar(folder: Path, n=3, **override_test) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(1, 6):
        (folder / f"data_batch_{i}").write_bytes(cifar_batch(n, i))
    (folder / "test_batch").write_bytes(cifar_batch(n, 9, **override_test))
    return folder


# ----------------------------------------------------------------------------- MNIST files

@pytest.mark.parametrize("gz", [True, False])
def test_mnist_tiny_files_load_exactly(tmp_path, gz):
    tx, ty, vx, vy = mnist_arrays()
    make_mnist(tmp_path, (tx, ty, vx, vy), gz=gz)
    ds = load_dataset("mnist", tmp_path, normalize=False)
    assert ds.input_shape == (4, 5, 1) and ds.num_classes == 10
    assert ds.train_x.dtype == np.float32 and ds.train_y.dtype == np.int64
    np.testing.assert_array_equal(ds.train_x[..., 0], tx.astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(ds.val_x[..., 0], vx.astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(ds.train_y, ty)
    np.testing.assert_array_equal(ds.val_y, vy)
    assert "t10k" in ds.val_source and ds.mean == (0.0,) and ds.std == (1.0,)


def test_mnist_torchvision_layout_and_holdout(tmp_path):
    tx, ty, vx, vy = mnist_arrays(n_train=10)
    make_mnist(tmp_path / "MNIST" / "raw", (tx, ty, vx, vy))
    ds = load_dataset("mnist", tmp_path, normalize=False, val_fraction=0.3, seed=5)
    assert (ds.num_train, ds.num_val) == (7, 3)  # the t10k files are unused
    assert "30% of the train samples held out, seed 5" in ds.val_source
    assert sorted(np.concatenate([ds.train_y, ds.val_y])) == sorted(ty)


def test_mnist_missing_files_say_what_and_how(tmp_path):
    with pytest.raises(DatasetError) as e:
        load_dataset("mnist", "/nonexistent")
    msg = str(e.value)
    assert "/nonexistent (no such folder)" in msg
    for stem in data.MNIST_FILES:
        assert stem + ".gz" in msg
    assert data.MNIST_MIRRORS[0] in msg and "--download" in msg
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    with pytest.raises(DatasetError, match=r"a_file \(a file, not a folder\)"):  # said 'no such folder'
        load_dataset("mnist", a_file)
    paths = make_mnist(tmp_path)
    paths["t10k-labels-idx1-ubyte"].unlink()
    with pytest.raises(DatasetError, match=r"expected t10k-labels-idx1-ubyte\.gz \(gzip") as e:
        load_dataset("mnist", tmp_path)
    assert "train-images" not in str(e.value)


def test_mnist_truncated_raw_file_names_sizes(tmp_path):
    paths = make_mnist(tmp_path, gz=False)
    f = paths["train-images-idx3-ubyte"]
    f.write_bytes(f.read_bytes()[:-7])  # 16 + 6*4*5 = 136 bytes expected
    with pytest.raises(DatasetError) as e:
        load_dataset("mnist", tmp_path)
    msg = str(e.value)
    assert str(f) in msg and "truncated" in msg and "expected 136 bytes" in msg and "got 129" in msg


def test_mnist_truncated_gz_content_and_stream(tmp_path):
    tx, ty, vx, vy = mnist_arrays()
    paths = make_mnist(tmp_path, (tx, ty, vx, vy))
    f = paths["t10k-labels-idx1-ubyte"]
    f.write_bytes(gzip.compress(idx_bytes(vy)[:-1]))  # valid gzip, short content
    with pytest.raises(DatasetError, match=r"t10k-labels-idx1-ubyte\.gz: truncated: header says 4, "
                                           r"expected 12 bytes, got 11 bytes \(decompressed\)"):
        load_dataset("mnist", tmp_path)
    f.write_bytes(gzip.compress(idx_bytes(vy))[:-10])  # the gzip stream itself is cut
    with pytest.raises(DatasetError, match=r"t10k-labels-idx1-ubyte\.gz: cannot read .*damaged or "
                                           "truncated"):
        load_dataset("mnist", tmp_path)


@pytest.mark.parametrize("mutate, pattern", [
    (lambda b: (2049).to_bytes(4, "big") + b[4:], r"not an IDX images file: magic number 2049, "
                                                   r"expected 2051"),
    (lambda b: b + b"\0\0", r"has trailing bytes: header says 6x4x5, expected 136 bytes, got 138"),
    (lambda b: b[:10], r"expected at least 16 bytes of header, got 10 bytes"),
])
def test_mnist_bad_image_headers(tmp_path, mutate, pattern):
    paths = make_mnist(tmp_path, gz=False)
    f = paths["train-images-idx3-ubyte"]
    f.write_bytes(mutate(f.read_bytes()))
    with pytest.raises(DatasetError, match=pattern):
        load_dataset("mnist", tmp_path)


def test_mnist_count_mismatch_and_label_range(tmp_path):
    tx, ty, vx, vy = mnist_arrays()
    make_mnist(tmp_path, (tx, ty[:5], vx, vy))
    with pytest.raises(DatasetError, match=r"holds 6 images but .*train-labels-idx1-ubyte\.gz "
                                           r"holds 5 labels"):
        load_dataset("mnist", tmp_path)
    bad = vy.copy()
    bad[2] = 10
    make_mnist(tmp_path, (tx, ty, vx, bad))
    with pytest.raises(DatasetError, match=r"t10k-labels-idx1-ubyte\.gz: label 10 at index 2 is "
                                           r"out of range 0\.\.9"):
        load_dataset("mnist", tmp_path)


def test_read_idx_labels_magic(tmp_path):
    f = write(tmp_path / "x", idx_bytes(np.zeros((2, 2, 2), np.uint8)), gz=False)
    with pytest.raises(DatasetError, match="not an IDX labels file: magic number 2051, expected 2049"):
        read_idx(f, "labels")
    assert read_idx(f, "images").shape == (2, 2, 2)


# ----------------------------------------------------------------------------- MNIST download

class _Server:
    """A local HTTP server serving ``files`` (name -> bytes) under /m/."""

    def __init__(self, files: dict[str, bytes]):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                blob = files.get(self.path.removeprefix("/m/"))
                self.send_response(200 if blob is not None else 404)
                self.send_header("Content-Length", str(len(blob or b"")))
                self.end_headers()
                self.wfile.write(blob or b"")

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/m/"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _refused_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/m/"  # closed again: connections are refused


@pytest.fixture
def mirror(monkeypatch):
    arrays = mnist_arrays()
    raw = {stem: idx_bytes(a) for stem, a in zip(data.MNIST_FILES, arrays)}
    monkeypatch.setattr(data, "MNIST_SHA256", {s: hashlib.sha256(b).hexdigest()
                                               for s, b in raw.items()})
    server = _Server({s + ".gz": gzip.compress(b) for s, b in raw.items()})
    yield server, arrays, raw
    server.close()


def test_download_falls_back_to_next_mirror(tmp_path, monkeypatch, mirror):
    server, (tx, ty, vx, vy), raw = mirror
    monkeypatch.setattr(data, "MNIST_MIRRORS", (_refused_url(), server.url))
    target = tmp_path / "new" / "mnist"
    target.mkdir(parents=True)  # an existing file is used, not downloaded again
    (target / "train-labels-idx1-ubyte").write_bytes(raw["train-labels-idx1-ubyte"])
    ds = load_dataset("mnist", target, download=True, normalize=False)
    np.testing.assert_array_equal(ds.val_y, vy)
    assert sorted(p.name for p in target.iterdir()) == [
        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte"]


def test_download_hash_mismatch_and_refused(tmp_path, monkeypatch, mirror):
    server, _, _ = mirror
    monkeypatch.setitem(data.MNIST_SHA256, "train-images-idx3-ubyte", "0" * 64)
    monkeypatch.setattr(data, "MNIST_MIRRORS", (server.url, _refused_url()))
    with pytest.raises(DatasetError) as e:
        load_dataset("mnist", tmp_path, download=True)
    msg = str(e.value)
    assert "could not download train-images-idx3-ubyte.gz" in msg and "SHA-256 mismatch" in msg
    assert "refused" in msg.lower() and "by hand" in msg
    assert not list(tmp_path.glob("train-images*"))  # nothing half-written is left behind


def test_download_times_out_instead_of_hanging(tmp_path, monkeypatch):
    with socket.socket() as s:  # listens, never answers
        s.bind(("127.0.0.1", 0))
        s.listen(5)
        monkeypatch.setattr(data, "MNIST_MIRRORS", (f"http://127.0.0.1:{s.getsockname()[1]}/",))
        monkeypatch.setattr(data, "DOWNLOAD_TIMEOUT_S", 0.3)
        start = time.monotonic()
        with pytest.raises(DatasetError, match="timed out"):
            load_dataset("mnist", tmp_path, download=True)
        assert time.monotonic() - start < 5


# ----------------------------------------------------------------------------- CIFAR-10

@pytest.mark.parametrize("sub, str_keys", [("cifar-10-batches-py", False), ("", True)])
def test_cifar_batches_to_nhwc(tmp_path, sub, str_keys):
    folder = make_cifar(tmp_path / sub if sub else tmp_path)
    if str_keys:
        (folder / "test_batch").write_bytes(cifar_batch(3, 9, str_keys=True))
    ds = load_dataset("cifar10", tmp_path, normalize=False)
    assert ds.input_shape == (32, 32, 3) and (ds.num_train, ds.num_val) == (15, 3)
    assert ds.class_names[0] == "airplane"
    first = pickle.loads(cifar_batch(3, 1))  # data_batch_1: planar R, G, B rows of 32
    d = first[b"data"]
    for n, h, w, c in [(0, 0, 0, 0), (1, 5, 7, 2), (2, 31, 30, 1)]:
        assert ds.train_x[n, h, w, c] == np.float32(d[n, c * 1024 + h * 32 + w]) / np.float32(255)
    np.testing.assert_array_equal(ds.train_y[:3], first[b"labels"])
    expected = pickle.loads(cifar_batch(3, 9))[b"data"].reshape(3, 3, 32, 32).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(ds.val_x, expected.astype(np.float32) / np.float32(255))


def test_cifar_reads_the_archive(tmp_path):
    folder = make_cifar(tmp_path / "x" / "cifar-10-batches-py")
    with tarfile.open(tmp_path / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(folder, arcname="cifar-10-batches-py")
    ds = load_dataset("cifar10", tmp_path)
    assert (ds.num_train, ds.num_val) == (15, 3)
    with tarfile.open(tmp_path / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(folder / "data_batch_1", arcname="cifar-10-batches-py/data_batch_1")
    with pytest.raises(DatasetError, match=r"the archive lacks cifar-10-batches-py/data_batch_2, "
                                           r"data_batch_3, data_batch_4, data_batch_5, test_batch"):
        load_dataset("cifar10", tmp_path)
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(b"not gzip")
    with pytest.raises(DatasetError, match=r"cifar-10-python\.tar\.gz: cannot read the archive"):
        load_dataset("cifar10", tmp_path)


@pytest.mark.parametrize("override, pattern", [
    ({"labels": [0, 10, 1]}, r"test_batch: label 10 at index 1 is out of range 0\.\.9"),
    ({"data": np.zeros((3, 3000), np.uint8)}, r"'data' must be a uint8 array of shape \(N, 3072\)"
                                              r".*got uint8 \(3, 3000\)"),
    ({"data": np.zeros((3, 3072), np.float32)}, r"got float32"),
    ({"labels": [1, 2]}, r"'labels' must be 3 integers"),
])
def test_cifar_validation(tmp_path, override, pattern):
    make_cifar(tmp_path, **override)
    with pytest.raises(DatasetError, match=pattern):
        load_dataset("cifar10", tmp_path)


def test_cifar_missing_key_missing_files_and_unsafe_pickle(tmp_path):
    folder = make_cifar(tmp_path)
    (folder / "data_batch_3").write_bytes(pickle.dumps({b"data": np.zeros((1, 3072), np.uint8)}))
    with pytest.raises(DatasetError, match=r"data_batch_3: missing key\(s\) labels"):
        load_dataset("cifar10", tmp_path)
    (folder / "data_batch_3").write_bytes(pickle.dumps(print))  # a global outside the allowlist
    with pytest.raises(DatasetError, match=r"data_batch_3: not a CIFAR-10 python batch .*refusing"):
        load_dataset("cifar10", tmp_path)
    (folder / "data_batch_3").unlink()
    with pytest.raises(DatasetError, match=r"expected data_batch_3; download https://www\.cs\."
                                           r"toronto\.edu/~kriz/cifar-10-python\.tar\.gz"):
        load_dataset("cifar10", tmp_path)


# ----------------------------------------------------------------------------- digits, split

def test_digits_default_split_is_seeded_and_complete():
    from sklearn.datasets import load_digits
    target = load_digits().target
    ds = load_dataset("digits")
    assert ds.input_shape == (8, 8, 1) and ds.num_classes == 10
    assert (ds.num_train, ds.num_val) == (1437, 360)  # ceil(0.2 * 1797) held out
    np.testing.assert_array_equal(np.bincount(np.concatenate([ds.train_y, ds.val_y])),
                                  np.bincount(target))
    again = load_dataset("digits", seed=0)
    np.testing.assert_array_equal(ds.val_x, again.val_x)
    other = load_dataset("digits", seed=1)
    assert not np.array_equal(ds.val_y, other.val_y)
    raw = load_dataset("digits", normalize=False)
    assert raw.train_x.min() == 0.0 and raw.train_x.max() == 1.0  # 0..16 scaled by 1/16
    assert set(np.unique(raw.train_x * 16)) <= set(range(17))


def test_normalization_uses_the_train_split_only(tmp_path):
    tx = np.zeros((4, 2, 2), np.uint8)
    tx[:2] = 255  # train: half white, half black -> mean 0.5, std 0.5
    vx = np.full((3, 2, 2), 51, np.uint8)  # val: 0.2 everywhere, unlike train
    make_mnist(tmp_path, (tx, np.arange(4, dtype=np.uint8), vx, np.zeros(3, np.uint8)))
    ds = load_dataset("mnist", tmp_path)
    assert ds.mean == pytest.approx((0.5,)) and ds.std == pytest.approx((0.5,))
    np.testing.assert_allclose(ds.val_x, (0.2 - 0.5) / 0.5, rtol=1e-6)
    np.testing.assert_allclose(np.unique(ds.train_x), [-1.0, 1.0])


def test_digits_normalized_train_stats():
    ds = load_dataset("digits")
    raw = load_dataset("digits", normalize=False)
    assert ds.mean[0] == pytest.approx(float(raw.train_x.astype(np.float64).mean()), abs=1e-12)
    assert ds.mean[0] != pytest.approx(float(np.concatenate([raw.train_x, raw.val_x]).mean()),
                                       abs=1e-7)
    assert abs(ds.train_x.mean()) < 1e-5 and ds.train_x.std() == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_allclose(ds.val_x, (raw.val_x - ds.mean[0]) / ds.std[0], atol=1e-5)


def test_bad_split_and_options():
    with pytest.raises(DatasetError, match=r"val_fraction must be in \(0, 1\), got 1\.5"):
        load_dataset("digits", val_fraction=1.5)
    with pytest.raises(DatasetError, match="unknown dataset 'imagenet'; available: digits, mnist, "
                                           "cifar10, synthetic"):
        load_dataset("imagenet")
    with pytest.raises(DatasetError, match="dataset 'digits' takes no option.s. input_shape"):
        load_dataset("digits", input_shape=(8, 8, 1))


def test_digits_needs_sklearn(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(DatasetError, match="pip install scikit-learn"):
        load_dataset("digits")


def test_digits_are_read_without_importing_sklearn(monkeypatch):
    """Importing scikit-learn took 1.4 s of every tr-train start on digits (most of a short run);
    its bundled file is now read directly, giving load_digits()'s arrays, and load_digits() is
    the fallback when the file is not where it used to be."""
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    bunch = load_digits()
    images, target = data._bundled_digits()
    assert images.dtype == bunch.images.dtype and np.array_equal(images, bunch.images)
    assert target.dtype == bunch.target.dtype and np.array_equal(target, bunch.target)
    code = "import sys; from tr_mlir.data import load_dataset; load_dataset('digits'); print('sklearn' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stdout + r.stderr
    ds = load_dataset("digits")
    monkeypatch.setattr(data, "DIGITS_FILE", Path("moved") / "digits.csv.gz")
    assert data._bundled_digits() is None
    fallback = load_dataset("digits")
    assert np.array_equal(fallback.train_x, ds.train_x) and np.array_equal(fallback.val_y, ds.val_y)


# ----------------------------------------------------------------------------- geometry

def test_pad_to_centers_with_zeros(tmp_path):
    tx, ty, vx, vy = mnist_arrays(rows=4, cols=4)
    make_mnist(tmp_path, (tx, ty, vx, vy))
    ds = load_dataset("mnist", tmp_path, pad_to=(8, 8), normalize=False)
    assert ds.input_shape == (8, 8, 1)
    np.testing.assert_array_equal(ds.train_x[:, 2:6, 2:6, 0], tx / np.float32(255))
    inner = np.zeros((8, 8), bool)
    inner[2:6, 2:6] = True
    assert not ds.train_x[:, ~inner].any() and not ds.val_x[:, ~inner].any()
    odd = load_dataset("mnist", tmp_path, pad_to=(7, 6), normalize=False)  # margins 1+2, 1+1
    np.testing.assert_array_equal(odd.val_x[:, 1:5, 1:5, 0], vx / np.float32(255))
    assert not odd.val_x[:, 5:].any() and not odd.val_x[:, :1].any()
    norm = load_dataset("mnist", tmp_path, pad_to=(8, 8))  # stats over the padded images
    assert norm.mean[0] == pytest.approx(float(ds.train_x.astype(np.float64).mean()))
    with pytest.raises(DatasetError, match="cannot pad 4x4 images to 3x8"):
        load_dataset("mnist", tmp_path, pad_to=(3, 8))


@pytest.mark.parametrize("size", [(7, 9), (3, 2), (4, 4)])
def test_resize_matches_torch_bilinear(size):
    torch = pytest.importorskip("torch")
    ds = load_dataset("synthetic", input_shape=(4, 5, 2), train_size=3, val_size=2,
                      normalize=False, resize_to=size)
    src = load_dataset("synthetic", input_shape=(4, 5, 2), train_size=3, val_size=2,
                       normalize=False)
    ref = torch.nn.functional.interpolate(torch.from_numpy(src.train_x).permute(0, 3, 1, 2),
                                          size=size, mode="bilinear", align_corners=False)
    np.testing.assert_allclose(ds.train_x, ref.permute(0, 2, 3, 1).numpy(), atol=1e-6)


# ----------------------------------------------------------------------------- synthetic

def test_synthetic_shapes_seed_and_learnable():
    ds = load_dataset("synthetic", input_shape=(6, 5, 3), num_classes=4, train_size=200,
                      val_size=50, seed=3)
    assert ds.input_shape == (6, 5, 3) and ds.num_classes == 4
    assert ds.train_x.shape == (200, 6, 5, 3) and ds.val_y.shape == (50,)
    assert ds.train_y.max() < 4 and len(ds.mean) == 3
    np.testing.assert_array_equal(ds.train_x, load_dataset(
        "synthetic", input_shape=(6, 5, 3), num_classes=4, train_size=200, val_size=50,
        seed=3).train_x)
    assert not np.array_equal(ds.train_x, load_dataset(
        "synthetic", input_shape=(6, 5, 3), num_classes=4, train_size=200, val_size=50,
        seed=4).train_x)
    centroids = np.stack([ds.train_x[ds.train_y == k].mean(0) for k in range(4)])
    dist = ((ds.val_x[:, None] - centroids[None]) ** 2).sum(axis=(2, 3, 4))
    assert (dist.argmin(1) == ds.val_y).mean() > 0.9
    with pytest.raises(DatasetError, match=r"input_shape must be \(H, W, C\)"):
        load_dataset("synthetic", input_shape=(6, 5))


# ----------------------------------------------------------------------------- batches

def _xy(n=10):
    y = np.arange(n, dtype=np.int64)
    return np.broadcast_to(y[:, None, None, None], (n, 2, 2, 1)).astype(np.float32), y


def test_batches_in_order_are_views_with_a_true_tail():
    x, y = _xy()
    batches = list(iterate_batches(x, y, 4))
    assert [b.size for b in batches] == [4, 4, 2] == [len(b.x) for b in batches]
    assert all(np.shares_memory(b.x, x) and np.shares_memory(b.y, y) for b in batches)
    np.testing.assert_array_equal(np.concatenate([b.y for b in batches]), y)
    assert [b.size for b in iterate_batches(x, y, 4, drop_last=True)] == [4, 4]
    assert num_batches(10, 4) == 3 and num_batches(10, 4, drop_last=True) == 2
    assert [b.size for b in iterate_batches(x, y, 5)] == [5, 5]


def test_shuffled_batches_are_seeded_permutations_in_reused_buffers():
    x, y = _xy(11)
    seen, firsts, buffers = [], [], set()
    for b in iterate_batches(x, y, 4, shuffle=True, seed=7):
        np.testing.assert_array_equal(b.x[:, 0, 0, 0], b.y)  # rows stay paired with labels
        seen.extend(b.y.tolist())
        buffers.add(b.x.__array_interface__["data"][0])
        assert not np.shares_memory(b.x, x)
    assert sorted(seen) == list(range(11)) and seen != list(range(11))
    assert len(buffers) == 1  # one buffer, reused
    again = [b.y.copy() for b in iterate_batches(x, y, 4, shuffle=True, seed=7)]
    assert np.concatenate(again).tolist() == seen
    other = np.concatenate([b.y.copy() for b in iterate_batches(x, y, 4, shuffle=True, seed=8)])
    assert other.tolist() != seen
    firsts = [b.size for b in iterate_batches(x, y, 4, shuffle=True, seed=7)]
    assert firsts == [4, 4, 3]


def test_pad_last_keeps_the_full_batch_shape():
    x, y = _xy(10)
    batches = [(b.x.copy(), b.y.copy(), b.size) for b in iterate_batches(x, y, 4, pad_last=True)]
    assert [len(bx) for bx, _, _ in batches] == [4, 4, 4] and [s for *_, s in batches] == [4, 4, 2]
    bx, by, _ = batches[-1]
    np.testing.assert_array_equal(by, [8, 9, 0, 0])
    assert not bx[2:].any() and (bx[:2, 0, 0, 0] == [8, 9]).all()


def test_batch_errors():
    x, y = _xy(4)
    with pytest.raises(DatasetError, match="batch_size must be >= 1, got 0"):
        list(iterate_batches(x, y, 0))
    with pytest.raises(DatasetError, match="x has 4 samples but y has 3"):
        list(iterate_batches(x, y[:3], 2))
    with pytest.raises(DatasetError, match="exclude each other"):
        list(iterate_batches(x, y, 3, drop_last=True, pad_last=True))


def test_dataset_checks_its_arrays():
    x = np.zeros((2, 2, 2, 1), np.float32)
    with pytest.raises(DatasetError, match=r"train_y must be int64 \(2,\), got int32"):
        Dataset("t", x, np.zeros(2, np.int32), x, np.zeros(2, np.int64), 2, (2, 2, 1))
    with pytest.raises(DatasetError, match=r"val_x must be float32 \(N, 3, 2, 1\)"):
        Dataset("t", np.zeros((2, 3, 2, 1), np.float32), np.zeros(2, np.int64), x,
                np.zeros(2, np.int64), 2, (3, 2, 1))


# ----------------------------------------------------------------------------- CLI, registry

def test_cli_errors_without_traceback(capsys, tmp_path):
    assert data.main(["mnist", "--data-dir", "/nonexistent"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: MNIST files not found in /nonexistent") and "Traceback" not in err
    assert err.count("\n") == 1
    make_mnist(tmp_path)
    assert data.main(["mnist", "--data-dir", str(tmp_path), "--pad-to", "6,6"]) == 0
    assert capsys.readouterr().out.startswith("mnist: 6 train, 4 val (the t10k test set), 6x6x1")
    assert data.main(["--list"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == list(DATASETS)


# ----------------------------------------------------------------------------- real MNIST

@pytest.mark.skipif(not REAL_MNIST.is_dir(), reason=f"real MNIST not present at {REAL_MNIST} "
                    "(shared/data/mnist beside the checkout); the tiny-file tests cover the loader")
def test_real_mnist_files():
    for stem, digest in data.MNIST_SHA256.items():  # the download check's hashes are the real ones
        with gzip.open(REAL_MNIST / f"{stem}.gz", "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest, stem
    ds = load_dataset("mnist", REAL_MNIST, pad_to=(32, 32))
    assert ds.input_shape == (32, 32, 1) and (ds.num_train, ds.num_val) == (60000, 10000)
    assert ds.val_source == "the 10k test set"
    np.testing.assert_array_equal(np.bincount(ds.val_y), [980, 1135, 1032, 1010, 982, 892, 958,
                                                          1028, 974, 1009])
    np.testing.assert_array_equal(np.bincount(ds.train_y), [5923, 6742, 5958, 6131, 5842, 5421,
                                                            5918, 6265, 5851, 5949])
    # the well-known 28x28 statistics, scaled to the padded area (the padding is 0)
    assert ds.mean[0] == pytest.approx(0.1307 * 784 / 1024, abs=1e-4)
    assert abs(float(ds.train_x.mean())) < 1e-4
    assert ds.train_x[:, :2].max() == ds.train_x.min()  # the border is the background value
