"""SummaryWriter: event files read back with TensorBoard's own reader."""

from __future__ import annotations

import gc
import io
import os
import struct
import zlib

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import dragon_core as dg
from dragon_core.summary import SummaryWriter, progress


def _read(logdir) -> EventAccumulator:
    ea = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "histograms": 0,
                                                      "images": 0})
    ea.Reload()
    return ea


def _decode_png(data: bytes) -> np.ndarray:
    """Pixels of an 8-bit, unfiltered, non-interlaced PNG (what the writer makes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack_from(">I4s", data, pos)
        body = data[pos + 8:pos + 8 + n]
        assert struct.unpack_from(">I", data, pos + 8 + n)[0] == zlib.crc32(kind + body)
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, color, _, _, interlace = header
    assert depth == 8 and interlace == 0
    c = {0: 1, 4: 2, 2: 3, 6: 4}[color]
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + w * c)
    assert not rows[:, 0].any()   # filter type 0 on every row
    return rows[:, 1:].reshape(h, w, c)


def test_scalars(tmp_path):
    values = [1.5, np.float32(2.5), dg.tensor(np.float32(3.5)), dg.tensor([4.5]),
              np.array([[5.5]]), 6, True]
    with SummaryWriter(tmp_path) as w:
        for step, v in enumerate(values):
            w.add_scalar("train/loss", v, step * 10)
        w.add_scalar("lr", 0.1, 0)
    ea = _read(tmp_path)
    assert sorted(ea.Tags()["scalars"]) == ["lr", "train/loss"]
    events = ea.Scalars("train/loss")
    assert [e.step for e in events] == [0, 10, 20, 30, 40, 50, 60]
    assert [e.value for e in events] == [1.5, 2.5, 3.5, 4.5, 5.5, 6.0, 1.0]


def test_add_scalars_writes_one_run_per_key(tmp_path):
    with SummaryWriter(tmp_path) as w:
        for step in range(3):
            w.add_scalars("loss", {"train": 1.0 / (step + 1), "val/a": 2.0 * step}, step)
    assert sorted(d for d in os.listdir(tmp_path) if (tmp_path / d).is_dir()) == \
        ["loss_train", "loss_val_a"]
    train = _read(tmp_path / "loss_train").Scalars("loss")
    val = _read(tmp_path / "loss_val_a").Scalars("loss")
    assert [e.value for e in train] == pytest.approx([1.0, 0.5, 1.0 / 3])
    assert [(e.step, e.value) for e in val] == [(0, 0.0), (1, 2.0), (2, 4.0)]


def test_histogram(tmp_path, rng):
    data = rng.standard_normal((40, 25)).astype(np.float32)
    with SummaryWriter(tmp_path) as w:
        w.add_histogram("weights", dg.tensor(data), 5)
        w.add_histogram("ints", np.array([1, 1, 2, 3, 3, 3]), 6, bins=3)
    ea = _read(tmp_path)
    (h,) = ea.Histograms("weights")
    v = h.histogram_value
    assert h.step == 5 and v.num == 1000 and sum(v.bucket) == 1000
    assert len(v.bucket) == 64 and len(v.bucket_limit) == 64
    assert v.min == pytest.approx(data.min()) and v.max == pytest.approx(data.max())
    assert v.bucket_limit[-1] == pytest.approx(data.max())
    assert v.sum == pytest.approx(float(data.astype(np.float64).sum()), rel=1e-6)
    (hi,) = ea.Histograms("ints")
    assert list(hi.histogram_value.bucket) == [2, 1, 3]


def test_images(tmp_path, rng):
    chw = rng.random((3, 8, 5)).astype(np.float32)
    hwc = rng.integers(0, 256, (6, 7, 4), dtype=np.uint8)
    grey = np.array([[0, 255], [128, 300]], np.int64)     # 300 is clipped
    with SummaryWriter(tmp_path) as w:
        w.add_image("rgb", dg.tensor(chw), 1)
        w.add_image("rgba", hwc, 2, dataformats="HWC")
        w.add_image("grey", grey, 3, dataformats="HW")
    ea = _read(tmp_path)
    (rgb,) = ea.Images("rgb")
    assert (rgb.height, rgb.width, rgb.step) == (8, 5, 1)
    expected = np.rint(chw.transpose(1, 2, 0).astype(np.float64) * 255).astype(np.uint8)
    np.testing.assert_array_equal(_decode_png(rgb.encoded_image_string), expected)
    (rgba,) = ea.Images("rgba")
    assert (rgba.height, rgba.width) == (6, 7)
    np.testing.assert_array_equal(_decode_png(rgba.encoded_image_string), hwc)
    (g,) = ea.Images("grey")
    np.testing.assert_array_equal(_decode_png(g.encoded_image_string)[..., 0],
                                  [[0, 255], [128, 255]])


def test_graph_from_function_and_graphdef(tmp_path):
    w = dg.tensor(np.ones((3, 2), np.float32))

    @dg.function
    def step(x):
        y = dg.ops.relu(x @ w + 1.0)
        w.assign(w * 0.5)
        return y.sum()

    x = dg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    graph = step.get_graph(x)
    expected = (len(graph.input) + len(graph.constant) + len(graph.captured) + len(graph.op)
                + len(graph.output) + len(graph.state_target))
    with SummaryWriter(tmp_path / "a") as sw:
        sw.add_graph(step, x)
    with SummaryWriter(tmp_path / "b") as sw:
        sw.add_graph(graph)

    for run in ("a", "b"):
        tb = _read(tmp_path / run).Graph()
        assert len(tb.node) == expected
        names = {n.name for n in tb.node}
        by_op = {}
        for n in tb.node:
            by_op.setdefault(n.op, []).append(n)
            for inp in n.input:   # every edge leads to an existing node
                assert inp.split(":")[0] in names
        assert {op.type for op in graph.op} <= set(by_op)
        assert len(by_op["Input"]) == 1 and len(by_op["Output"]) == 1
        assert len(by_op["Assign"]) == 1 and len(by_op["Variable"]) == 1
        first = next(n for n in tb.node if n.name == graph.op[0].name)
        assert first.op == graph.op[0].type
        assert len(first.input) == len(graph.op[0].input)
        assert "_output_shapes" in first.attr


def test_graph_with_unknown_tensor_is_refused(tmp_path):
    from dragon_core import proto as P
    g = P.GraphDef(name="g", input=["x"], output=["y"])
    g.op.add(name="Relu_0", type="Relu", input=["nowhere"], output=["y"])
    with SummaryWriter(tmp_path) as w:
        with pytest.raises(ValueError, match=r"tensor 'nowhere' is read but nothing"):
            w.add_graph(g)
        with pytest.raises(TypeError, match=r"add_graph expects"):
            w.add_graph("not a graph")


def test_bad_values_raise(tmp_path):
    with SummaryWriter(tmp_path) as w:
        with pytest.raises(ValueError, match=r"add_scalar\('s'\).*shape \(2,\)"):
            w.add_scalar("s", dg.tensor([1.0, 2.0]), 0)
        with pytest.raises(ValueError, match=r"1 of 3 values are NaN"):
            w.add_histogram("h", np.array([1.0, np.nan, 2.0]), 0)
        with pytest.raises(ValueError, match=r"empty"):
            w.add_histogram("h", np.array([]), 0)
        with pytest.raises(ValueError, match=r"got 5"):
            w.add_image("i", np.zeros((5, 4, 4)), 0)
        with pytest.raises(ValueError, match=r"needs a 3-d image"):
            w.add_image("i", np.zeros((4, 4)), 0)
        with pytest.raises(ValueError, match=r"dataformats must be one of"):
            w.add_image("i", np.zeros((4, 4, 3)), 0, dataformats="NHWC")


def test_flush_close_and_context_manager(tmp_path):
    w = SummaryWriter(tmp_path, flush_secs=3600)
    w.add_scalar("a", 1.0, 0)
    w.flush()
    assert [e.value for e in _read(tmp_path).Scalars("a")] == [1.0]
    w.close()
    w.close()   # idempotent
    with pytest.raises(RuntimeError, match=r"is closed"):
        w.add_scalar("a", 2.0, 1)
    assert "closed" in repr(w)


def test_unclosed_writer_is_flushed_when_collected(tmp_path):
    w = SummaryWriter(tmp_path, flush_secs=3600)
    w.add_scalar("a", 3.0, 7)
    del w
    gc.collect()
    assert [(e.step, e.value) for e in _read(tmp_path).Scalars("a")] == [(7, 3.0)]


def test_progress_is_quiet_unless_terminal_or_forced():
    quiet = io.StringIO()
    assert list(progress(range(5), desc="epoch", file=quiet)) == [0, 1, 2, 3, 4]
    assert quiet.getvalue() == ""

    loud = io.StringIO()
    assert list(progress(range(5), desc="epoch", file=loud, force=True)) == list(range(5))
    assert "epoch" in loud.getvalue() and "5/5" in loud.getvalue()

    off = io.StringIO()
    assert list(progress(iter("ab"), file=off, force=True, disable=True)) == ["a", "b"]
    assert off.getvalue() == ""

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    tty = Terminal()
    assert list(progress([1, 2], desc="tty", file=tty)) == [1, 2]
    assert "tty" in tty.getvalue()
