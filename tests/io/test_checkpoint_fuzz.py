"""Checkpoints: a seeded round-trip fuzzer over trees of every supported
type and every dtype (views, 0-d, empty, huge ints, NaN bits, unicode keys,
deep nesting, shared tensors), file objects, symbolic links, concurrent
saves, foreign files, and vm.torch's ``torch.save``/``torch.load`` against
real torch 2.13."""

from __future__ import annotations

import collections
import io
import math
import os
import struct
import threading

import numpy as np
import pytest

import dragon_core as dg
from dragon_core.errors import CheckpointError
from dragon_core.serialization import load, save

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64"]
FLOATS = ("float16", "bfloat16", "float32", "float64")
ARRAY_ONLY = (">f4", ">i8", "complex64", "complex128")
KEYS = ["w", "ünïcødé", "🐉 dragon", "", "a.b.c", "\udcff lone surrogate", "\x00nul"]


def _bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def _float(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


SPECIAL_FLOATS = [0.0, -0.0, math.inf, -math.inf, math.nan, _float(0xFFF8000000000000),
                  _float(0x7FF0000000000001), _float(0xFFF4000000000abc), 5e-324,
                  1.7976931348623157e308, 0.1]
SPECIAL_INTS = [0, -1, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**64, 3**300, -(7**500)]


def _array(rng, dtype: str, shape) -> np.ndarray:
    npdt = dg.as_dtype(dtype).numpy
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.issubdtype(npdt, np.integer):
        info = np.iinfo(npdt)
        return rng.integers(info.min, info.max, size=shape, dtype=npdt, endpoint=True)
    # any bit pattern: NaN payloads, -0.0, infinities, subnormals
    raw = rng.integers(0, 256, size=(int(np.prod(shape)) * npdt.itemsize,), dtype=np.uint8)
    return raw.view(npdt).reshape(shape)


def _tensor(rng, dtype: str):
    """A tensor of ``dtype``: contiguous, or a view (transposed, permuted,
    expanded, sliced), 0-d or empty, maybe requiring gradients."""
    kind = rng.integers(0, 7)
    shape = [(), (0,), (3, 0), (4,), (2, 3), (3, 1, 2)][rng.integers(0, 6)]
    base = dg.tensor(_array(rng, dtype, shape))
    if kind == 1 and base.ndim >= 2:
        base = base.T
    elif kind == 2 and base.ndim == 3:
        base = base.permute([2, 0, 1])
    elif kind == 3 and base.ndim >= 1:
        base = base.broadcast_to((2,) + tuple(base.shape))
    elif kind == 4 and base.ndim >= 1 and base.shape[0] > 1:
        base = base[1:]
    elif kind == 5 and base.ndim >= 1:
        base = base[..., ::-1]                   # negative strides
    elif kind == 6 and base.ndim >= 1:
        base = base[::2]                         # a stepped slice
    if dtype in FLOATS and rng.random() < 0.4:
        base = base.detach()
        base.requires_grad = True
    return base


def _leaf(rng, shared: list):
    k = rng.integers(0, 14)
    if k == 0:
        return None
    if k == 1:
        return bool(rng.integers(0, 2))
    if k == 2:
        return SPECIAL_INTS[rng.integers(0, len(SPECIAL_INTS))] + int(rng.integers(-3, 4))
    if k == 3:
        return SPECIAL_FLOATS[rng.integers(0, len(SPECIAL_FLOATS))]
    if k == 4:
        return KEYS[rng.integers(0, len(KEYS))] * int(rng.integers(0, 3))
    if k == 5:
        return rng.bytes(int(rng.integers(0, 20)))
    if k in (6, 7, 8):
        t = _tensor(rng, DTYPES[rng.integers(0, len(DTYPES))])
        shared.append(t)
        return t
    if k == 9 and shared:
        return shared[rng.integers(0, len(shared))]          # reached twice: one object
    if k == 10:
        dt = (DTYPES + list(ARRAY_ONLY))[rng.integers(0, len(DTYPES) + len(ARRAY_ONLY))]
        npdt = np.dtype(dt) if dt in ARRAY_ONLY else dg.as_dtype(dt).numpy
        a = rng.integers(0, 256, size=(6 * npdt.itemsize,), dtype=np.uint8).view(npdt)
        if npdt.kind == "b":
            a = rng.random(6) < 0.5
        return a.reshape(2, 3).T if rng.random() < 0.5 else a[::2]      # non-contiguous
    if k == 11:
        return np.float32(rng.standard_normal()) if rng.random() < 0.5 else \
            np.int64(rng.integers(-2**62, 2**62))
    if k == 12:
        return dg.as_dtype(DTYPES[rng.integers(0, len(DTYPES))])
    return float(rng.standard_normal())


def _key(rng):
    k = rng.integers(0, 6)
    if k == 0:
        return KEYS[rng.integers(0, len(KEYS))] + str(rng.integers(0, 1000))
    if k == 1:
        return int(rng.integers(-5, 5)) * (2**70 if rng.random() < 0.3 else 1)
    if k == 2:
        return (int(rng.integers(0, 3)), "p", None)
    if k == 3:
        return float(rng.integers(0, 4)) / 2
    if k == 4:
        return None if rng.random() < 0.5 else bool(rng.integers(0, 2))
    return f"k{rng.integers(0, 10**6)}"


def _tree(rng, depth: int, shared: list):
    if depth == 0 or rng.random() < 0.3:
        return _leaf(rng, shared)
    k = rng.integers(0, 4)
    n = int(rng.integers(0, 5))
    if k == 0:
        return {_key(rng): _tree(rng, depth - 1, shared) for _ in range(n)}
    if k == 1:
        return collections.OrderedDict((f"o{i}", _tree(rng, depth - 1, shared))
                                       for i in range(n))
    if k == 2:
        return tuple(_tree(rng, depth - 1, shared) for _ in range(n))
    return [_tree(rng, depth - 1, shared) for _ in range(n)]


def _host(t) -> np.ndarray:
    return np.ascontiguousarray(t.numpy())


def assert_round_trip(got, want, where="obj", seen=None):
    """``got`` (loaded) equals ``want`` (saved) bit for bit, with the
    documented type changes (dict subclasses -> dict) and object sharing."""
    seen = {} if seen is None else seen
    if isinstance(want, dg.Tensor):
        assert isinstance(got, dg.Tensor), where
        assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape), where
        assert str(got.device) == str(want.device), where
        assert got.requires_grad == want.requires_grad, where
        assert _host(got).tobytes() == _host(want).tobytes(), where
        if id(want) in seen:
            assert got is seen[id(want)], f"{where}: shared tensor loaded twice"
        seen[id(want)] = got
        return
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.shape == want.shape, where
        assert got.dtype == want.dtype.newbyteorder("=") or got.dtype == want.dtype, where
        np.testing.assert_array_equal(got.astype(want.dtype), want, err_msg=where)
        assert np.ascontiguousarray(got.astype(want.dtype)).tobytes() == \
            np.ascontiguousarray(want).tobytes(), where
        return
    if isinstance(want, np.generic):
        assert type(got) is type(want) and got.tobytes() == want.tobytes(), where
        return
    if isinstance(want, float):
        assert type(got) is float and _bits(got) == _bits(want), \
            f"{where}: {got!r} ({_bits(got):#x}) vs {want!r} ({_bits(want):#x})"
        return
    if isinstance(want, dict):
        assert type(got) is dict and len(got) == len(want), where
        for (kg, vg), (kw, vw) in zip(got.items(), want.items()):
            assert kg == kw or (kg != kg and kw != kw), f"{where}: key {kg!r} vs {kw!r}"
            assert_round_trip(vg, vw, f"{where}[{kw!r}]", seen)
        return
    if isinstance(want, (list, tuple)):
        assert type(got) is (tuple if isinstance(want, tuple) else list), where
        assert len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want)):
            assert_round_trip(a, b, f"{where}[{i}]", seen)
        return
    assert type(got) is type(want) and got == want, f"{where}: {got!r} vs {want!r}"


@pytest.mark.parametrize("seed", range(60))
def test_fuzz_round_trip(tmp_path, seed):
    rng = np.random.default_rng(seed)
    tree = {"root": _tree(rng, 6, []), "all": [_tensor(rng, d) for d in DTYPES]}
    path = tmp_path / "fuzz.ckpt"
    save(tree, path)
    assert_round_trip(load(path), tree)
    buf = io.BytesIO()                         # a file object gives the same bytes
    save(tree, buf)
    assert buf.getvalue() == path.read_bytes()
    buf.seek(0)
    assert_round_trip(load(buf), tree)


def test_deep_nesting_round_trips(tmp_path):
    tree = leaf = []
    for _ in range(200):
        leaf.append({"d": []})
        leaf = leaf[-1]["d"]
    leaf.append(dg.tensor(np.arange(3)))
    save(tree, tmp_path / "deep.ckpt")
    assert_round_trip(load(tmp_path / "deep.ckpt"), tree)


def test_nan_bits_of_python_floats_round_trip(tmp_path):
    values = [_float(b) for b in (0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001,
                                  0xFFFFFFFFFFFFFFFF, 0x7FF4000000000abc)] + [-0.0, 0.0]
    save({"v": values, "k": {values[1]: 1}}, tmp_path / "nan.ckpt")
    got = load(tmp_path / "nan.ckpt")
    assert [_bits(x) for x in got["v"]] == [_bits(x) for x in values]
    assert _bits(next(iter(got["k"]))) == 0xFFF8000000000000


def test_dtypes_round_trip_as_dtypes(tmp_path):
    tree = {d: dg.as_dtype(d) for d in DTYPES}
    save(tree, tmp_path / "dt.ckpt")
    assert load(tmp_path / "dt.ckpt") == tree


def test_views_of_one_storage_load_as_independent_tensors(tmp_path):
    # Documented: only the same tensor object is shared; views are stored by
    # value (torch would keep their storage shared).
    base = dg.tensor(np.arange(6, dtype=np.float32))
    save({"base": base, "view": base[2:5], "again": base}, tmp_path / "v.ckpt")
    got = load(tmp_path / "v.ckpt")
    assert got["base"] is got["again"] and got["view"] is not got["base"]
    assert got["view"].numpy().tolist() == [2.0, 3.0, 4.0]


# ---------------------------------------------------------------- file objects and paths

def test_file_objects_and_path_forms(tmp_path):
    obj = {"w": dg.tensor(np.arange(4, dtype=np.float32)), "n": 3}
    with open(tmp_path / "f.ckpt", "wb") as f:
        save(obj, f)
    with open(tmp_path / "f.ckpt", "rb") as f:
        assert_round_trip(load(f), obj)
    save(obj, str(tmp_path / "s.ckpt"))
    save(obj, os.fsencode(tmp_path / "b.ckpt"))
    for name in ("s.ckpt", "b.ckpt"):
        assert (tmp_path / name).read_bytes() == (tmp_path / "f.ckpt").read_bytes()
        assert_round_trip(load(os.fsencode(tmp_path / name)), obj)


def test_bad_file_objects_raise_clearly(tmp_path):
    with pytest.raises(TypeError, match="binary file object with write"):
        save(1, 42)
    with pytest.raises(TypeError, match="binary file object with read"):
        load(42)
    save(1, tmp_path / "t.ckpt")
    with open(tmp_path / "t.ckpt", encoding="latin-1") as f:
        with pytest.raises(TypeError, match=r"binary mode \('rb'\)"):
            load(f)


@pytest.mark.parametrize("keep", [0, 7, 48, 100, -17, -1])
def test_truncated_file_objects_raise(keep):
    buf = io.BytesIO()
    save({"w": dg.tensor(np.ones(50, np.float32))}, buf)
    data = buf.getvalue()
    with pytest.raises(CheckpointError, match="truncated|corrupt"):
        load(io.BytesIO(data[:keep]))


def test_save_through_a_symlink_replaces_its_target(tmp_path):
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "epoch3.ckpt"
    save({"epoch": 3}, target)
    os.chmod(target, 0o640)
    link = tmp_path / "latest.ckpt"
    link.symlink_to(target)
    save({"epoch": 4}, link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert load(target) == {"epoch": 4} and os.stat(target).st_mode & 0o777 == 0o640
    assert [n for n in os.listdir(tmp_path / "runs") if n.startswith(".tmp-")] == []
    dangling = tmp_path / "new.ckpt"
    dangling.symlink_to(tmp_path / "runs" / "epoch5.ckpt")
    save({"epoch": 5}, dangling)
    assert dangling.is_symlink() and load(tmp_path / "runs" / "epoch5.ckpt") == {"epoch": 5}


def test_concurrent_saves_to_one_path_always_leave_a_whole_checkpoint(tmp_path):
    path = tmp_path / "race.ckpt"
    payloads = [{"writer": i, "w": dg.tensor(np.full(20000, i, np.float32))} for i in range(4)]
    save(payloads[0], path)
    errors, seen = [], set()
    stop = threading.Event()

    def writer(i):
        try:
            for _ in range(8):
                save(payloads[i], path)
        except Exception as e:   # pragma: no cover - reported below
            errors.append(e)

    def reader():
        while not stop.is_set():
            try:
                got = load(path)
                assert np.all(got["w"].numpy() == got["writer"])
                seen.add(got["writer"])
            except Exception as e:   # pragma: no cover - reported below
                errors.append(e)
                return
    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    r = threading.Thread(target=reader)
    r.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    r.join()
    assert errors == []
    assert load(path)["writer"] in range(4)
    assert [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")] == []


# ---------------------------------------------------------------- foreign files

def test_foreign_files_say_what_they_are(tmp_path):
    torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")
    torch.save({"w": torch.ones(2)}, tmp_path / "zip.pt")
    torch.save({"w": torch.ones(2)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    np.save(tmp_path / "a.npy", np.ones(2))
    for name, hint in (("zip.pt", "torch.save"), ("legacy.pt", "torch.save"),
                       ("a.npy", "numpy.load")):
        with pytest.raises(CheckpointError, match=f"not a Dragon checkpoint.*{hint}"):
            load(tmp_path / name)
    save({"w": dg.tensor(np.ones(2, np.float32))}, tmp_path / "ours.ckpt")
    with pytest.raises(Exception):                    # real torch refuses ours, loudly
        torch.load(tmp_path / "ours.ckpt", weights_only=True)


@pytest.mark.parametrize("obj", [np.ma.masked_array([1.0, 2.0], mask=[0, 1]),
                                 np.matrix([[1, 2]])])
def test_array_subclasses_are_refused_not_stripped(tmp_path, obj):
    save({"ok": 1}, tmp_path / "s.ckpt")
    with pytest.raises(TypeError, match="NumPy array subclass.*obj\\['x'\\].*left as it was"):
        save({"x": obj}, tmp_path / "s.ckpt")
    assert load(tmp_path / "s.ckpt") == {"ok": 1}


def test_memmaps_are_stored_as_arrays(tmp_path):
    mm = np.memmap(tmp_path / "raw.bin", dtype=np.float32, mode="w+", shape=(4,))
    mm[:] = [1, 2, 3, 4]
    save({"x": mm}, tmp_path / "m.ckpt")
    got = load(tmp_path / "m.ckpt")["x"]
    assert type(got) is np.ndarray and got.tolist() == [1, 2, 3, 4]
