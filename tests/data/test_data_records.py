"""The record file format and the example encoding."""

from __future__ import annotations

import os
import pickle
import struct
import warnings

import hypothesis
import hypothesis.strategies as st
import numpy as np
import pytest

import dragon_core as dg
from dragon_core.data import (RecordError, RecordReader, RecordWriter, decode_example,
                              encode_example)
from dragon_core.data._records import FOOTER_SIZE, HEADER_SIZE


def _payloads():
    rng = np.random.default_rng(0)
    return [b"", b"a", bytes(range(256)), rng.bytes(100_000), b"last"]


def test_bytes_round_trip(tmp_path):
    path = tmp_path / "b.dgr"
    payloads = _payloads()
    with RecordWriter(path) as w:
        for i, p in enumerate(payloads):
            assert w.write(p) == i
        assert len(w) == len(payloads)
    with RecordReader(path) as r:
        assert len(r) == len(payloads)
        assert list(r) == payloads
        assert r[3] == payloads[3] and r[-1] == b"last" and r.read(0) == b""
        r.verify()
        with pytest.raises(IndexError, match="out of range"):
            r[len(payloads)]


def test_empty_file_and_memoryview(tmp_path):
    with RecordWriter(tmp_path / "e.dgr"):
        pass
    assert len(RecordReader(tmp_path / "e.dgr")) == 0
    with RecordWriter(tmp_path / "m.dgr") as w:
        w.write(memoryview(np.arange(4, dtype=np.int32)))
        w.write(bytearray(b"xy"))
    r = RecordReader(tmp_path / "m.dgr")
    assert np.frombuffer(r[0], np.int32).tolist() == [0, 1, 2, 3] and r[1] == b"xy"


def test_write_rejects_non_bytes(tmp_path):
    with RecordWriter(tmp_path / "x.dgr") as w:
        with pytest.raises(TypeError, match="bytes-like"):
            w.write("text")
        with pytest.raises(TypeError, match="write_example"):
            w.write({"a": 1})


def test_example_round_trip(tmp_path):
    examples = [
        {"image": np.arange(24, dtype=np.uint8).reshape(2, 3, 4), "label": 7,
         "score": 0.25, "name": "cat ü", "raw": b"\x00\x01", "ok": True,
         "f16": np.ones((2,), np.float16), "big": np.array([[1.5]], ">f8"),
         "scalar": np.float32(3.5), "empty": np.zeros((0, 5), np.int64),
         "t": dg.tensor(np.array([1, 2], np.int32))},
        {},
    ]
    with RecordWriter(tmp_path / "ex.dgr") as w:
        for e in examples:
            w.write_example(e)
    r = RecordReader(tmp_path / "ex.dgr")
    got = decode_example(r[0])
    assert list(got) == list(examples[0])
    for key in ("label", "score", "name", "raw", "ok"):
        assert got[key] == examples[0][key] and type(got[key]) is type(examples[0][key])
    for key in ("image", "f16", "big", "empty"):
        np.testing.assert_array_equal(got[key], examples[0][key])
        assert got[key].dtype == examples[0][key].dtype
        assert got[key].shape == examples[0][key].shape
    assert got["image"].flags.writeable and got["image"].flags.c_contiguous
    assert got["scalar"].shape == () and got["scalar"] == np.float32(3.5)
    assert got["t"].tolist() == [1, 2] and got["t"].dtype == np.int32
    assert decode_example(r[1]) == {}


@pytest.mark.parametrize("value, error", [
    (np.array([object()], dtype=object), TypeError),
    ({1, 2}, TypeError),
    (1 << 64, OverflowError),
])
def test_encode_rejects(value, error):
    with pytest.raises(error, match="field 'v'"):
        encode_example({"v": value})
    with pytest.raises(TypeError, match="keys must be str"):
        encode_example({1: 2})


def test_decode_rejects_garbage():
    with pytest.raises(RecordError, match="not an encoded example"):
        decode_example(b"hello world")
    good = encode_example({"a": np.arange(10)})
    with pytest.raises(RecordError, match="malformed example"):
        decode_example(good[:-3])
    with pytest.raises(RecordError, match="trailing"):
        decode_example(good + b"\x00")


# Valid examples covering every kind of field, for the damage tests below.
_FUZZ_EXAMPLES = [
    {},
    {"label": 7, "score": -0.5, "ok": False, "name": "chat \u00fc", "raw": b"\x00\xff"},
    {"image": np.arange(24, dtype=np.uint8).reshape(2, 3, 4),
     "big": np.array([[1.5, -2.0]], ">f8"), "c": np.array([1 + 2j], np.complex64),
     "when": np.array(["2024-01-02"], "datetime64[D]"), "s": np.array([b"ab", b"c"]),
     "u": np.array(["xy"]), "scalar": np.float16(3.0), "empty": np.zeros((0, 5), np.int64),
     "b": np.array([True, False])},
]


def _decodes_or_record_error(payload: bytes) -> None:
    """The contract on damaged input: a dict, or RecordError; nothing else,
    not even a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            out = decode_example(payload)
        except RecordError:
            return
    assert isinstance(out, dict)


@pytest.mark.parametrize("payload", [
    b"DGEX", b"DGEX\x01", b"DGEX\x01\x01\x00\x00", b"DGEX\x01\x01\x00\x00\x00",
    b"DGEX\x01\x01\x00\x00\x00\x01\x00", b"DGEX\x00\x00\x00\x00\x00",
    b"DG", b"",
], ids=lambda p: f"{len(p)}bytes")
def test_decode_short_payloads_raise_record_error(payload):
    with pytest.raises(RecordError):
        decode_example(payload)


@pytest.mark.parametrize("example", _FUZZ_EXAMPLES, ids=["empty", "scalars", "arrays"])
def test_decode_every_truncation_raises_record_error(example):
    good = encode_example(example)
    for cut in range(len(good)):
        with pytest.raises(RecordError):
            decode_example(good[:cut])
    assert decode_example(good).keys() == example.keys()


def _crafted_array(dtype: bytes, shape: tuple, data: bytes = b"") -> bytes:
    head = b"DGEX\x01" + struct.pack("<I", 1) + struct.pack("<H", 1) + b"a" + b"\x05"
    return (head + bytes([len(dtype)]) + dtype + bytes([len(shape)])
            + struct.pack(f"<{len(shape)}Q", *shape) + data)


_CRAFTED = [
    (_crafted_array(b"<f4", (1,) * 70, b"\x00" * 4), "70 dimensions"),
    (_crafted_array(b"<f4", (2**63, 0)), "does not fit"),
    (_crafted_array(b"<f4", (2**62, 2**62, 0)), "cannot be built|does not fit"),
    (_crafted_array(b"<f4", (2**40, 2**40)), "does not fit"),
    (_crafted_array(b"|O8", (1,), b"\x00" * 8), "invalid dtype"),
    (_crafted_array(b"f4,i4", (1,), b"\x00" * 8), "invalid dtype"),
    (_crafted_array(b"|V0", (3,)), "invalid dtype"),
    (_crafted_array(b"<M8[xyz]", (1,), b"\x00" * 8), "invalid dtype"),
    (_crafted_array(b"\xff\xfe", (1,)), "invalid dtype"),
    (b"DGEX\x01\x01\x00\x00\x00\x01\x00\xff\x02" + b"\x00" * 8, "not UTF-8"),
    (b"DGEX\x01\x01\x00\x00\x00\x01\x00a\x04\x07", "bool field 'a' holds 7"),
    (b"DGEX\x01\x01\x00\x00\x00\x01\x00a\x09", "unknown kind 9"),
    (b"DGEX\x01\x02\x00\x00\x00" + b"\x01\x00a\x04\x01" * 2, "appears twice"),
    (b"DGEX\x01\x01\x00\x00\x00\x01\x00a\x01" + struct.pack("<Q", 2**64 - 1), "truncated"),
]


@pytest.mark.parametrize("payload, message", _CRAFTED, ids=[f"crafted{i}"
                                                             for i in range(len(_CRAFTED))])
def test_decode_crafted_payloads_raise_record_error(payload, message):
    with pytest.raises(RecordError, match=message):
        decode_example(payload)


def test_decode_fuzz_truncations_and_flips():
    """Random damage to valid examples: RecordError or a dict, never another error."""
    rng = np.random.default_rng(1234)
    for example in _FUZZ_EXAMPLES:
        good = encode_example(example)
        for _ in range(1500):
            data = bytearray(good)
            for _ in range(int(rng.integers(1, 4))):
                i = int(rng.integers(len(data)))
                if rng.random() < 0.5:
                    data[i] ^= 1 << int(rng.integers(8))
                else:
                    data[i] = int(rng.integers(256))
            if rng.random() < 0.3:
                data = data[:int(rng.integers(len(data) + 1))]
            _decodes_or_record_error(bytes(data))


@hypothesis.settings(max_examples=300, deadline=None, derandomize=True)
@hypothesis.given(st.sampled_from(_FUZZ_EXAMPLES), st.data())
def test_decode_property_damage_never_escapes_record_error(example, data):
    good = bytearray(encode_example(example))
    edits = data.draw(st.lists(st.tuples(st.integers(0, len(good) - 1), st.integers(0, 255)),
                               max_size=4))
    for i, value in edits:
        good[i] = value
    cut = data.draw(st.integers(0, len(good)))
    _decodes_or_record_error(bytes(good[:cut]))


def test_atomic_write(tmp_path):
    path = tmp_path / "a.dgr"
    w = RecordWriter(path)
    w.write(b"x")
    assert not path.exists()                       # nothing visible before close
    w.close()
    assert path.exists() and len(RecordReader(path)) == 1
    with pytest.raises(RuntimeError):
        with RecordWriter(path) as w:              # a failed rewrite keeps the old file
            w.write(b"y")
            w.write(b"z")
            raise RuntimeError("interrupted")
    assert list(RecordReader(path)) == [b"x"]
    assert sorted(os.listdir(tmp_path)) == ["a.dgr"]   # no temp file left behind
    with pytest.raises(ValueError, match="closed"):
        w.write(b"late")


def _corrupt(src, dst, offset, xor=0x40):
    data = bytearray(open(src, "rb").read())
    data[offset] ^= xor
    open(dst, "wb").write(bytes(data))


@pytest.fixture
def three(tmp_path):
    path = tmp_path / "three.dgr"
    with RecordWriter(path) as w:
        for p in (b"alpha" * 10, b"beta" * 10, b"gamma" * 10):
            w.write(p)
    return path


def _record_offset(path, i):
    r = RecordReader(path)
    return int(r._bounds[i])


def test_flipped_payload_byte_names_file_and_record(three, tmp_path):
    bad = tmp_path / "bad.dgr"
    _corrupt(three, bad, _record_offset(three, 1) + 12 + 5)
    r = RecordReader(bad)                              # index is intact: opens fine
    assert r[0] == b"alpha" * 10 and r[2] == b"gamma" * 10
    with pytest.raises(RecordError, match="payload.*checksum") as info:
        r[1]
    assert info.value.index == 1 and info.value.path == str(bad)
    assert str(bad) in str(info.value) and "record 1" in str(info.value)
    with pytest.raises(RecordError):
        r.verify()


def test_flipped_length_byte(three, tmp_path):
    bad = tmp_path / "bad.dgr"
    _corrupt(three, bad, _record_offset(three, 2) + 1)
    with pytest.raises(RecordError, match="record 2: corrupt record header"):
        RecordReader(bad)[2]


@pytest.mark.parametrize("where, message", [
    (0, "bad magic"),
    (9, "corrupt file header"),
    (-3, "footer"),
    (-FOOTER_SIZE - 6, "corrupt record index"),
])
def test_corrupt_structure(three, tmp_path, where, message):
    bad = tmp_path / "bad.dgr"
    size = os.path.getsize(three)
    _corrupt(three, bad, where % size)
    with pytest.raises(RecordError, match=message) as info:
        RecordReader(bad)
    assert str(bad) in str(info.value)


@pytest.mark.parametrize("keep", [0, 10, HEADER_SIZE + 30, -1])
def test_truncated_file(three, tmp_path, keep):
    data = open(three, "rb").read()
    bad = tmp_path / "cut.dgr"
    open(bad, "wb").write(data[:keep])
    with pytest.raises(RecordError, match="short|truncated") as info:
        RecordReader(bad)
    assert str(bad) in str(info.value)


def test_not_a_record_file(tmp_path):
    path = tmp_path / "text.dgr"
    path.write_bytes(b"hello, this is certainly not a record file at all")
    with pytest.raises(RecordError, match="not a record file"):
        RecordReader(path)


def test_reader_pickles_by_path(three):
    r = pickle.loads(pickle.dumps(RecordReader(three)))
    assert r[2] == b"gamma" * 10 and r.path == str(three)
    err = pickle.loads(pickle.dumps(RecordError("boom", path="f", index=3)))
    assert isinstance(err, RecordError) and err.index == 3 and str(err) == "f, record 3: boom"


def test_bfloat16_arrays_round_trip_as_bfloat16():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    arr = np.array([[1.5, -2.0], [3.25, 0.0]], dtype=ml_dtypes.bfloat16)
    out = dg.data.decode_example(dg.data.encode_example(
        {"x": arr, "t": dg.tensor(arr), "v": np.zeros(2, "V2")}))
    assert out["x"].dtype == ml_dtypes.bfloat16 and out["t"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out["x"].astype(np.float32), arr.astype(np.float32))
    np.testing.assert_array_equal(out["t"].astype(np.float32), arr.astype(np.float32))
    assert out["v"].dtype == np.dtype("V2")      # a plain void stays a void


def test_other_extension_dtypes_are_refused_not_stored_as_void():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(TypeError, match="cannot be encoded"):
        dg.data.encode_example({"x": np.zeros(2, ml_dtypes.float8_e4m3fn)})


def test_writer_gives_the_file_an_ordinary_mode_and_writes_through_symlinks(tmp_path):
    from dragon_core.data import RecordReader, RecordWriter
    old = os.umask(0o022)
    try:
        with RecordWriter(tmp_path / "new.dgr") as w:
            w.write(b"a")
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "new.dgr").st_mode & 0o777 == 0o644     # not mkstemp's 0600
    os.chmod(tmp_path / "new.dgr", 0o640)
    link = tmp_path / "latest.dgr"
    link.symlink_to(tmp_path / "new.dgr")
    with RecordWriter(link) as w:
        w.write(b"b")
        w.write(b"c")
    assert link.is_symlink() and os.stat(tmp_path / "new.dgr").st_mode & 0o777 == 0o640
    with RecordReader(tmp_path / "new.dgr") as r:
        assert [bytes(r[i]) for i in range(len(r))] == [b"b", b"c"]
    assert sorted(os.listdir(tmp_path)) == ["latest.dgr", "new.dgr"]
