"""Checkpoints: round trips, the documented layout, corruption, atomic writes."""

from __future__ import annotations

import collections
import json
import math
import os
import pickle
import struct
import sys
import warnings
import zlib

import hypothesis
import hypothesis.strategies as st
import numpy as np
import pytest

import dragon_core as dg
from dragon_core import serialization
from dragon_core.errors import CheckpointError
from dragon_core.serialization import load, save

TENSOR_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16",
                 "bfloat16", "float32", "float64"]
SHAPES = [(2, 3), (), (0,), (3, 0, 2), (5,)]


def _array(rng, dtype: str, shape) -> np.ndarray:
    npdt = dg.as_dtype(dtype).numpy
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.issubdtype(npdt, np.integer):
        info = np.iinfo(npdt)
        return rng.integers(info.min, info.max, size=shape, dtype=npdt, endpoint=True)
    out = (rng.standard_normal(shape) * 100).astype(npdt)
    if out.size >= 3:   # special values survive bit for bit
        flat = out.reshape(-1)
        flat[0], flat[1], flat[2] = np.nan, np.inf, -0.0
    return out


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and \
        np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


# ---------------------------------------------------------------- round trips

@pytest.mark.parametrize("dtype", TENSOR_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_tensor_round_trip_every_dtype_and_shape(tmp_path, rng, dtype, shape):
    arr = _array(rng, dtype, shape)
    t = dg.tensor(arr)
    save({"t": t}, tmp_path / "c.ckpt")
    out = load(tmp_path / "c.ckpt")["t"]
    assert isinstance(out, dg.Tensor)
    assert out.dtype == dg.as_dtype(dtype)
    assert out.shape == shape
    assert str(out.device) == "cpu:0"
    assert _same_bits(out.numpy(), arr)


@pytest.mark.parametrize("dtype", ["bool", "uint8", "uint16", "uint32", "uint64", "int8",
                                   "int64", "float16", "bfloat16", "float64", "complex64",
                                   "complex128"])
def test_ndarray_round_trip(tmp_path, rng, dtype):
    npdt = dg.as_dtype("bfloat16").numpy if dtype == "bfloat16" else np.dtype(dtype)
    arr = (rng.standard_normal((4, 3)) * 50).astype(npdt)
    save([arr, arr[1:, ::2], arr[0, 0]], tmp_path / "a.ckpt")
    full, strided, scalar = load(tmp_path / "a.ckpt")
    assert type(full) is np.ndarray and _same_bits(full, arr)
    assert _same_bits(strided, np.ascontiguousarray(arr[1:, ::2]))
    assert type(scalar) is type(arr[0, 0]) and scalar.dtype == arr.dtype
    assert scalar.tobytes() == arr[0, 0].tobytes()


def test_non_contiguous_tensors_are_saved_by_value(tmp_path):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    views = {"cols": base[:, ::2], "transposed": base.T, "reversed": base[::-1, 1:],
             "broadcast": np.broadcast_to(base[0], (3, 6))}
    tensors = {k: dg.from_numpy(v) for k, v in views.items()}
    assert not tensors["transposed"].is_contiguous()
    save(tensors, tmp_path / "v.ckpt")
    out = load(tmp_path / "v.ckpt")
    for k, v in views.items():
        assert out[k].is_contiguous()
        np.testing.assert_array_equal(out[k].numpy(), v)


def test_state_dicts_and_plain_values_round_trip(tmp_path, rng):
    w = dg.tensor(rng.standard_normal((3, 4)).astype(np.float32)).requires_grad_()
    b = dg.tensor(np.zeros(4, np.float32))
    model = collections.OrderedDict([("fc.weight", w), ("fc.bias", b)])
    optim = {
        "state": {0: {"step": 7, "exp_avg": dg.tensor(np.ones((3, 4), np.float32))},
                  1: {"step": 7, "exp_avg": dg.tensor(np.ones(4, np.float32))}},
        "param_groups": [{"params": [0, 1], "lr": 1e-3, "betas": (0.9, 0.999),
                          "eps": 1e-8, "amsgrad": False, "name": None}],
    }
    extras = {"epoch": 3, "big": 2**100, "neg": -(2**70), "nan": math.nan,
              "inf": -math.inf, "text": "héllo ✓", "odd": "\udc80\x00", "raw": b"\x00\xffdata",
              "nested": [[], (), {}, [(1, 2.5, "x")]], (1, "k"): "tuple key",
              2.5: "float key", None: "none key", True: "bool key",
              "np_int": np.int64(5), "np_float": np.float64(0.25), "np_bool": np.bool_(True)}
    save({"model": model, "optimizer": optim, "extras": extras}, tmp_path / "s.ckpt")
    out = load(tmp_path / "s.ckpt")

    assert type(out["model"]) is dict and list(out["model"]) == ["fc.weight", "fc.bias"]
    assert out["model"]["fc.weight"].requires_grad
    assert not out["model"]["fc.bias"].requires_grad
    np.testing.assert_array_equal(out["model"]["fc.weight"].numpy(), w.numpy())
    assert list(out["optimizer"]["state"]) == [0, 1]
    assert out["optimizer"]["state"][1]["step"] == 7
    group = out["optimizer"]["param_groups"][0]
    assert group == {"params": [0, 1], "lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8,
                     "amsgrad": False, "name": None}
    assert type(group["betas"]) is tuple and type(group["params"]) is list
    e = out["extras"]
    assert e["big"] == 2**100 and e["neg"] == -(2**70) and e["epoch"] == 3
    assert math.isnan(e["nan"]) and e["inf"] == -math.inf
    assert e["text"] == "héllo ✓" and e["odd"] == "\udc80\x00" and e["raw"] == b"\x00\xffdata"
    assert e["nested"] == [[], (), {}, [(1, 2.5, "x")]]
    assert e[(1, "k")] == "tuple key" and e[2.5] == "float key"
    assert e[None] == "none key" and e[True] == "bool key"
    assert type(e["np_int"]) is np.int64 and e["np_int"] == 5
    assert type(e["np_float"]) is np.float64 and e["np_float"] == 0.25
    assert type(e["np_bool"]) is np.bool_ and e["np_bool"]


def test_plain_root_objects(tmp_path):
    for obj in [None, 3, "s", [1, [2]], (), {}, dg.tensor(np.float32(2.5))]:
        save(obj, tmp_path / "r.ckpt")
        out = load(tmp_path / "r.ckpt")
        if isinstance(obj, dg.Tensor):
            assert out.shape == () and out.item() == 2.5
        else:
            assert out == obj and type(out) is type(obj)


BIG = 10**5000                 # beyond Python's default 4300-digit str() limit


@pytest.mark.parametrize("digits_limit", [None, 640])
def test_ints_of_any_size_round_trip(tmp_path, digits_limit):
    """Ints of any size, as values and in keys, whatever the process's limit
    on decimal conversions (sys.set_int_max_str_digits)."""
    values = [BIG, -BIG, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**64, 7**2000, 0, -1]
    obj = {"values": values, "nested": [(BIG, {"k": -BIG})], BIG: "big key",
           (1, -BIG, ("x", 2**70)): "tuple key", np.int64(-5): BIG}
    old = sys.get_int_max_str_digits()
    if digits_limit is not None:
        sys.set_int_max_str_digits(digits_limit)
    try:
        save(obj, tmp_path / "big.ckpt")
        got = load(tmp_path / "big.ckpt")
    finally:
        sys.set_int_max_str_digits(old)
    assert got == obj and [type(v) for v in got["values"]] == [int] * len(values)
    assert got[-5] == BIG and type(next(iter(got[(1, -BIG, ("x", 2**70))]))) is str


def test_shared_tensors_load_as_one_object(tmp_path):
    t = dg.tensor(np.arange(4, dtype=np.float32))
    a = np.arange(3)
    save({"encoder": t, "decoder": t, "arrays": [a, a]}, tmp_path / "t.ckpt")
    out = load(tmp_path / "t.ckpt")
    assert out["encoder"] is out["decoder"]
    assert out["arrays"][0] is out["arrays"][1]


def test_map_location(tmp_path):
    save({"w": dg.tensor(np.ones(2, np.float32))}, tmp_path / "m.ckpt")
    assert str(load(tmp_path / "m.ckpt", map_location="cpu")["w"].device) == "cpu:0"
    assert str(load(tmp_path / "m.ckpt", map_location={"cuda:0": "cpu"})["w"].device) == "cpu:0"
    seen = []

    def place(t, saved):
        seen.append(saved)
        return t.to(dg.float64)
    assert load(tmp_path / "m.ckpt", map_location=place)["w"].dtype == dg.float64
    assert seen == ["cpu:0"]
    with pytest.raises(CheckpointError, match=r"obj\['w'\].*no_such_device.*map_location"):
        load(tmp_path / "m.ckpt", map_location="no_such_device")


# ---------------------------------------------------------------- the documented layout

def test_layout_matches_docs(tmp_path):
    """Parse a file with nothing but the layout described in docs/checkpoints.md."""
    arr = np.arange(10, dtype=np.int32)
    save({"a": dg.tensor(arr), "b": 1.5}, tmp_path / "l.ckpt")
    raw = (tmp_path / "l.ckpt").read_bytes()
    magic, version, prefix_crc = struct.unpack_from("<8sII", raw, 0)
    assert magic == b"\x89DGCKPT\n" and version == 1
    assert prefix_crc == zlib.crc32(raw[:12])
    meta_len, data_offset, data_len, reserved, meta_crc = struct.unpack_from("<QQQII", raw, 16)
    assert reserved == 0 and data_offset % 64 == 0 and data_len % 64 == 0
    meta = raw[48:48 + meta_len]
    assert meta_crc == zlib.crc32(raw[16:44] + meta)
    desc = json.loads(meta)
    assert desc["root"]["t"] == "dict"
    (buf,) = desc["buffers"]
    assert buf == {"kind": "tensor", "dtype": "int32", "shape": [10], "offset": 0,
                   "nbytes": 40, "device": "cpu:0", "requires_grad": False}
    start = data_offset + buf["offset"]
    assert np.array_equal(np.frombuffer(raw[start:start + 40], "<i4"), arr)
    data_crc, reserved, end = struct.unpack_from("<II8s", raw, data_offset + data_len)
    assert end == b"DGCKEND\n" and reserved == 0
    assert data_crc == zlib.crc32(raw[data_offset:data_offset + data_len])
    assert len(raw) == data_offset + data_len + 16


def test_buffers_are_aligned(tmp_path):
    tensors = [dg.tensor(np.ones(n, np.uint8)) for n in (1, 63, 65, 0, 7)]
    save(tensors, tmp_path / "al.ckpt")
    raw = (tmp_path / "al.ckpt").read_bytes()
    meta_len, = struct.unpack_from("<Q", raw, 16)
    offsets = [b["offset"] for b in json.loads(raw[48:48 + meta_len])["buffers"]]
    assert all(o % 64 == 0 for o in offsets) and len(set(offsets)) == len(offsets) - 1


# ---------------------------------------------------------------- damaged files

@pytest.fixture
def small_ckpt(tmp_path):
    path = tmp_path / "small.ckpt"
    save({"w": dg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)), "step": 3,
          "name": "run", "arr": np.arange(5, dtype=np.int16)}, path)
    return path


def test_every_flipped_byte_is_detected(small_ckpt):
    good = small_ckpt.read_bytes()
    bad = small_ckpt.with_name("bad.ckpt")
    for i in range(len(good)):
        data = bytearray(good)
        data[i] ^= 0x5A
        bad.write_bytes(data)
        with pytest.raises(CheckpointError) as info:
            load(bad)
        assert str(bad) in str(info.value), i
        assert info.value.path == str(bad)


def test_flipped_size_field_reports_damage_not_truncation(small_ckpt):
    raw = bytearray(small_ckpt.read_bytes())
    raw[32] ^= 0x40   # data_len
    small_ckpt.write_bytes(raw)
    with pytest.raises(CheckpointError, match=r"fails its CRC32 check"):
        load(small_ckpt)


def test_flipped_data_byte_reports_checksum(small_ckpt):
    raw = bytearray(small_ckpt.read_bytes())
    raw[-20] ^= 1   # inside the data section (before the 16-byte trailer)
    small_ckpt.write_bytes(raw)
    with pytest.raises(CheckpointError, match=r"tensor data fails its CRC32 check"):
        load(small_ckpt)


def test_truncated_files_raise(small_ckpt):
    good = small_ckpt.read_bytes()
    for cut in [0, 1, 7, 8, 12, 16, 30, 47, 48, 60, len(good) // 2, len(good) - 17,
                len(good) - 16, len(good) - 1]:
        small_ckpt.write_bytes(good[:cut])
        with pytest.raises(CheckpointError, match=r"truncated") as info:
            load(small_ckpt)
        assert str(small_ckpt) in str(info.value)


def test_trailing_garbage_raises(small_ckpt):
    small_ckpt.write_bytes(small_ckpt.read_bytes() + b"\x00")
    with pytest.raises(CheckpointError, match=r"unexpected bytes after the end"):
        load(small_ckpt)


def test_not_a_checkpoint(tmp_path):
    path = tmp_path / "x.pkl"
    path.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(CheckpointError, match=r"not a Dragon checkpoint"):
        load(path)
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "missing.ckpt")


def test_newer_format_version_raises(small_ckpt):
    raw = bytearray(small_ckpt.read_bytes())
    struct.pack_into("<I", raw, 8, 2)
    struct.pack_into("<I", raw, 12, zlib.crc32(bytes(raw[:12])))
    small_ckpt.write_bytes(raw)
    with pytest.raises(CheckpointError, match=r"format version 2, newer.*pip install -U"):
        load(small_ckpt)


def _with_description(raw: bytes, meta: bytes) -> bytes:
    """``raw`` (a checkpoint) with its description replaced by ``meta``,
    every checksum recomputed: what a writer bug or a crafted file gives."""
    meta_len, data_offset, data_len, _, _ = struct.unpack_from("<QQQII", raw, 16)
    new_offset = (48 + len(meta) + 63) // 64 * 64
    head = struct.pack("<QQQI", len(meta), new_offset, data_len, 0)
    out = raw[:16] + head + struct.pack("<I", zlib.crc32(meta, zlib.crc32(head))) + meta
    return out + bytes(new_offset - len(out)) + raw[data_offset:]


def _description(raw: bytes) -> dict:
    meta_len = struct.unpack_from("<Q", raw, 16)[0]
    return json.loads(raw[48:48 + meta_len])


def _set_nbytes(d):
    d["buffers"][0]["nbytes"] = 12


def _huge_shape(d):
    d["buffers"][0].update(shape=[10**12], nbytes=4 * 10**12)


def _foreign_node(d):
    d["root"]["v"][0] = {"t": "pickle", "v": "cos\nsystem\n"}


def _object_dtype(d):
    d["buffers"][0]["dtype"] = "object"


def _list_key(d):
    d["root"]["k"][0] = {"t": "list", "v": []}


def _many_dims(d):
    d["buffers"][0]["shape"] = [1] * 64 + [4]          # 65 dimensions, still 16 bytes


def _int_requires_grad(d):
    d["buffers"][0]["dtype"] = "int32"                  # int32[4]: still 16 bytes


def _tensor_in_tuple_key(d):
    d["root"]["k"][0] = {"t": "tuple", "v": [{"t": "int", "v": 1}, {"t": "tensor", "i": 0}]}


def _impossible_shape(d):
    d["buffers"][0].update(shape=[2**62, 2**62, 0], nbytes=0)


def _bad_bigint(d):
    d["root"]["v"][0] = {"t": "bigint", "v": "12_34"}


def _bad_device(d):
    d["buffers"][0]["device"] = ["cpu"]


def _bad_requires_grad(d):
    d["buffers"][0]["requires_grad"] = "yes"


@pytest.mark.parametrize("mutate, message", [
    (_set_nbytes, r"12 bytes do not hold float32\[4\]"),
    (_huge_shape, r"lies beyond the 64-byte data section"),
    (_foreign_node, r"invalid node of type 'pickle' at obj\['t'\]"),
    (_object_dtype, r"unknown dtype 'object'"),
    (_list_key, r"invalid dict key at obj"),
    (_many_dims, r"buffer 0 has 65 dimensions; at most 64"),
    (_int_requires_grad, r"int32 tensor marked requires_grad"),
    (_tensor_in_tuple_key, r"invalid dict key at obj"),
    (_impossible_shape, r"impossible shape"),
    (_bad_bigint, r"invalid node of type 'bigint' at obj\['t'\]"),
    (_bad_device, r"invalid device"),
    (_bad_requires_grad, r"invalid requires_grad"),
])
def test_malformed_description_with_valid_checksums(tmp_path, mutate, message):
    """A writer bug (valid CRCs, nonsense inside) still gives a clear error."""
    path = tmp_path / "m.ckpt"
    save({"t": dg.tensor(np.ones(4, np.float32)).requires_grad_()}, path)
    raw = path.read_bytes()
    desc = _description(raw)
    mutate(desc)
    path.write_bytes(_with_description(raw, json.dumps(desc).encode()))
    with pytest.raises(CheckpointError, match="malformed structure description: .*" + message) \
            as info:
        load(path)
    assert str(path) in str(info.value) and info.value.path == str(path)


# ---------------------------------------------------------------- unsupported objects

class _Opaque:
    pass


@pytest.mark.parametrize("obj, where, what", [
    ({"a": [1, {"b": _Opaque()}]}, r"obj\['a'\]\[1\]\['b'\]", "_Opaque"),
    ([{1, 2}], r"obj\[0\]", "set"),
    ({"c": 1j}, r"obj\['c'\]", "complex"),
    ({"f": len}, r"obj\['f'\]", "builtin_function_or_method"),
    ({"o": np.array([object()])}, r"obj\['o'\]", "dtype object"),
    ({"k": {dg.tensor(np.ones(1)): 1}}, r"obj\['k'\]", "dict key"),
])
def test_unsupported_objects_name_their_place(tmp_path, obj, where, what):
    with pytest.raises(TypeError, match=where) as info:
        save(obj, tmp_path / "u.ckpt")
    assert what in str(info.value)
    assert not (tmp_path / "u.ckpt").exists()


@pytest.mark.parametrize("key, what", [
    ((1, dg.tensor(np.ones(2, np.float32))), "a tensor inside the key"),
    (("a", (2, (dg.tensor(np.ones(1)),))), "a tensor inside the key"),
    ((BIG, dg.tensor(np.ones(1))), r"a tensor inside the key \(<int of 16610 bits>"),
    ((1, frozenset({2})), "type frozenset"),
    ((1, b"x"), "type bytes"),
    (dg.tensor(np.ones(1)), "holding a tensor in the dict"),
])
def test_keys_holding_tensors_are_refused_and_the_old_file_kept(tmp_path, key, what):
    path = tmp_path / "keys.ckpt"
    save({"step": 1}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError, match=what) as info:
        save({"state": {key: 1}}, path)
    assert "obj['state']" in str(info.value) and str(path) in str(info.value)
    assert path.read_bytes() == before and _temp_files(tmp_path) == []


def test_reference_cycle_is_refused(tmp_path):
    loop: list = [1]
    loop.append({"again": loop})
    with pytest.raises(ValueError, match=r"obj\[1\]\['again'\].*cycle"):
        save(loop, tmp_path / "c.ckpt")


# ---------------------------------------------------------------- atomic writes

def _temp_files(folder):
    return [n for n in os.listdir(folder) if n.startswith(".tmp-")]


def test_failed_save_keeps_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "keep.ckpt"
    save({"step": 1, "w": dg.tensor(np.ones(1000, np.float32))}, path)
    before = path.read_bytes()

    with pytest.raises(TypeError):
        save({"step": 2, "bad": object()}, path)
    assert path.read_bytes() == before

    def broken(f, blobs, data_len):
        f.write(b"\x01" * 100)   # a partial write, then the disk fails
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(serialization, "_write_data", broken)
    with pytest.raises(OSError, match="No space left"):
        save({"step": 3, "w": dg.tensor(np.zeros(1000, np.float32))}, path)
    assert path.read_bytes() == before
    assert _temp_files(tmp_path) == []
    monkeypatch.undo()
    assert load(path)["step"] == 1


def test_save_keeps_file_mode_and_replaces(tmp_path):
    path = tmp_path / "mode.ckpt"
    save(1, path)
    os.chmod(path, 0o640)
    save(2, path)
    assert load(path) == 2
    assert os.stat(path).st_mode & 0o777 == 0o640
    assert _temp_files(tmp_path) == []


# ---------------------------------------------------------------- fuzzing damaged files

def _rich_checkpoint(path) -> bytes:
    save({"w": dg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).requires_grad_(),
          "i": dg.tensor(np.arange(4, dtype=np.int64)), "tied": [None, None],
          "arr": np.arange(5, dtype=np.uint16), "s": np.float64(2.5), "big": BIG,
          "plain": [1, -2.5, float("nan"), "txt", b"\x00b", True, None, (1, 2)],
          3: {(1, "a"): 2.0, None: [], 2**70: {}}}, path)
    return path.read_bytes()


def _loads_or_checkpoint_error(path) -> None:
    """The contract on damaged files: CheckpointError naming the file, or a
    successful load; any other exception (or warning) fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            load(path)
        except CheckpointError as e:
            assert e.path == str(path) and str(path) in str(e), e


def test_fuzz_random_damage(tmp_path):
    """Flipped bytes, overwritten runs, truncations: all caught (CRCs)."""
    good = _rich_checkpoint(tmp_path / "good.ckpt")
    bad = tmp_path / "bad.ckpt"
    rng = np.random.default_rng(5)
    for _ in range(400):
        data = bytearray(good)
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(len(data)))
            n = int(rng.integers(1, 9))
            data[i:i + n] = rng.bytes(len(data[i:i + n]))
        if rng.random() < 0.3:
            data = data[:int(rng.integers(len(data)))]
        if bytes(data) == good:
            continue
        bad.write_bytes(bytes(data))
        with pytest.raises(CheckpointError):
            load(bad)


def test_fuzz_description_bytes_with_valid_checksums(tmp_path):
    """Damage inside the JSON text, checksums recomputed (a crafted file)."""
    good = _rich_checkpoint(tmp_path / "good.ckpt")
    meta = json.dumps(_description(good)).encode()
    bad = tmp_path / "bad.ckpt"
    rng = np.random.default_rng(6)
    for _ in range(1500):
        text = bytearray(meta)
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(len(text)))
            text[i] = int(rng.choice(list(b'{}[]",:0123456789-eE.tvnfkiabx \\')))
        if rng.random() < 0.1:
            text = text[:int(rng.integers(len(text)))]
        bad.write_bytes(_with_description(good, bytes(text)))
        _loads_or_checkpoint_error(bad)


_ODD_VALUES = [None, True, False, 0, 1, -1, 3, 64, 2**31, 2**63, 2**64 + 1, -(2**63),
               10**30, 0.5, -1e308, "", "x", "nan", "tensor", "ndarray", "npscalar", "bigint",
               "tuple", "dict", "int", "float32", "int64", "object", "cpu:0", "nowhere:9",
               "-ff", "ff", [], [1] * 70, [2**40, 2**40], [-1], [0.5], {}, {"t": "tensor"},
               {"t": "tensor", "i": 0}, {"t": "npscalar", "i": 4}, {"t": "ndarray", "i": 99},
               {"t": "tuple", "v": [{"t": "tensor", "i": 1}]},
               {"t": "tuple", "v": [{"t": "list", "v": []}]},
               {"t": "bigint", "v": "-1f"}, {"t": "bigint", "v": 5}, {"t": "int", "v": 1.5},
               {"t": "dict", "k": [{"t": "int", "v": 1}], "v": []},
               {"t": "dict", "k": [{"t": "dict", "k": [], "v": []}], "v": [{"t": "none"}]},
               {"t": "bytes", "v": "!!"}, {"t": "bytes", "v": "\u00e9"},
               {"t": "float", "v": "Infinity"}]


def _slots(node, out):
    """Every (container, key) place of a JSON tree."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for k, v in list(items):
        out.append((node, k))
        if isinstance(v, (dict, list)):
            _slots(v, out)
    return out


def _mutate(desc, draw_index, draw_value) -> None:
    slots = _slots(desc, [])
    container, key = slots[draw_index(len(slots))]
    choice = draw_value(len(_ODD_VALUES) + 2)
    if choice == len(_ODD_VALUES):
        del container[key]                                   # a missing field
    elif choice == len(_ODD_VALUES) + 1 and isinstance(container[key], list):
        container[key].append(json.loads(json.dumps(container[key][:1])))  # an extra item
    else:
        container[key] = json.loads(json.dumps(_ODD_VALUES[min(choice, len(_ODD_VALUES) - 1)]))


def test_fuzz_description_structure_with_valid_checksums(tmp_path):
    """Fields replaced by values of the wrong type, size or meaning, removed,
    or duplicated, with valid checksums: CheckpointError or a load."""
    good = _rich_checkpoint(tmp_path / "good.ckpt")
    bad = tmp_path / "bad.ckpt"
    rng = np.random.default_rng(7)
    for _ in range(1200):
        desc = _description(good)
        for _ in range(int(rng.integers(1, 4))):
            _mutate(desc, lambda n: int(rng.integers(n)), lambda n: int(rng.integers(n)))
        bad.write_bytes(_with_description(good, json.dumps(desc).encode()))
        _loads_or_checkpoint_error(bad)


@hypothesis.settings(max_examples=200, deadline=None, derandomize=True,
                     suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(st.data())
def test_fuzz_description_property(tmp_path, data):
    good = _rich_checkpoint(tmp_path / "good.ckpt")
    desc = _description(good)
    for _ in range(data.draw(st.integers(1, 3))):
        _mutate(desc, lambda n: data.draw(st.integers(0, n - 1)),
                lambda n: data.draw(st.integers(0, n - 1)))
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(_with_description(good, json.dumps(desc).encode()))
    _loads_or_checkpoint_error(bad)
