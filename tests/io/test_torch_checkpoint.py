"""vm.torch's ``torch.save``/``torch.load`` against real torch 2.13's
behaviour: what round-trips (requires_grad, shared tensors, dtypes, NaN bits,
file objects) and every ``map_location`` form torch accepts."""

from __future__ import annotations

import io
import math
import struct

import pytest

from dragon_core.errors import CheckpointError
from dragon_core.vm import torch as vt

torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")


def _state(t):
    """(name, shape, requires_grad, values) of a vm.torch or real torch tensor."""
    return (str(t.dtype), tuple(t.shape), t.requires_grad, t.detach().numpy().tolist())


def _both(tmp_path, build):
    """Save ``build(torch)`` with real torch and ``build(vt)`` with vm.torch;
    return what each loads."""
    torch.save(build(torch), tmp_path / "real.pt")
    vt.save(build(vt), tmp_path / "ours.pt")
    return torch.load(tmp_path / "real.pt"), vt.load(tmp_path / "ours.pt")


def test_requires_grad_and_sharing_survive_as_in_torch(tmp_path):
    def build(t):
        w = t.arange(3.0).requires_grad_()
        return {"w": w, "tied": w, "b": t.zeros(2), "list": [w]}
    real, ours = _both(tmp_path, build)
    for key in ("w", "tied", "b"):
        assert _state(ours[key]) == _state(real[key]), key
    assert (ours["w"] is ours["tied"] is ours["list"][0]) == \
        (real["w"] is real["tied"] is real["list"][0]) is True


def test_dtypes_load_as_dtypes(tmp_path):
    def build(t):
        return {"dtype": t.float16, "all": [t.float32, t.bfloat16, t.int64, t.bool, t.uint8]}
    real, ours = _both(tmp_path, build)
    assert repr(ours) == repr(real)
    assert ours["dtype"] is vt.float16


def test_python_float_bits_round_trip_as_in_torch(tmp_path):
    values = [struct.unpack("<d", struct.pack("<Q", b))[0]
              for b in (0xFFF8000000000000, 0x7FF0000000000123)] + [-0.0, math.inf]

    def bits(xs):
        return [struct.pack("<d", x) for x in xs]
    real, ours = _both(tmp_path, lambda t: {"v": values})
    assert bits(ours["v"]) == bits(real["v"]) == bits(values)


def test_file_objects(tmp_path):
    buf = io.BytesIO()
    vt.save({"w": vt.arange(4.0)}, buf)
    buf.seek(0)
    assert vt.load(buf)["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
    with open(tmp_path / "f.pt", "wb") as f:
        vt.save([vt.ones(2)], f)
    with open(tmp_path / "f.pt", "rb") as f:
        assert vt.load(f)[0].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("form", ["str", "device", "dict", "callable", "callable_none"])
def test_map_location_forms_torch_accepts(tmp_path, form):
    def build(t):
        return {"w": t.arange(3.0), "n": 1}
    loc = {"str": ("cpu", "cpu"), "device": (torch.device("cpu"), vt.device("cpu")),
           "dict": ({"cpu": "cpu"}, {"cpu": "cpu"}),
           "callable": (lambda storage, location: storage,) * 2,
           "callable_none": (lambda storage, location: None,) * 2}[form]
    torch.save(build(torch), tmp_path / "real.pt")
    vt.save(build(vt), tmp_path / "ours.pt")
    real = torch.load(tmp_path / "real.pt", map_location=loc[0])
    ours = vt.load(tmp_path / "ours.pt", map_location=loc[1])
    assert _state(ours["w"]) == _state(real["w"]) and ours["n"] == real["n"] == 1


def test_map_location_callable_sees_torch_locations(tmp_path):
    seen = []
    vt.save({"w": vt.ones(2)}, tmp_path / "o.pt")
    out = vt.load(tmp_path / "o.pt", map_location=lambda s, loc: seen.append(loc) or s * 2)
    assert seen == ["cpu"] and out["w"].tolist() == [2.0, 2.0]
    with pytest.raises(TypeError, match="map_location returned str"):
        vt.load(tmp_path / "o.pt", map_location=lambda s, loc: "cpu")


def test_unknown_map_location_device_is_a_clear_error(tmp_path):
    vt.save({"w": vt.ones(2)}, tmp_path / "o.pt")
    with pytest.raises((CheckpointError, ValueError), match="nodevice"):
        vt.load(tmp_path / "o.pt", map_location="nodevice:0")


def test_real_torch_files_are_refused_with_advice(tmp_path):
    torch.save({"w": torch.ones(2)}, tmp_path / "real.pt")
    with pytest.raises(CheckpointError, match="torch.save.*never unpickles"):
        vt.load(tmp_path / "real.pt")
