"""torch.save of tensors that are views of one another.

Dragon's checkpoint format stores each tensor's values, so two saved tensors
that overlap in memory load as independent tensors, where torch's load keeps
them views of one storage. That used to happen silently; a UserWarning now
names both paths. The same tensor reached twice still loads as one object.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import dragon_core.vm.torch as vt


def _save(obj):
    buf = io.BytesIO()
    vt.save(obj, buf)
    buf.seek(0)
    return vt.load(buf)


@pytest.mark.parametrize("view", [lambda x: x[2:], lambda x: x.view(2, 3),
                                  lambda x: x.view(2, 3).t(), lambda x: x[::2],
                                  lambda x: x[1:5]])
def test_overlapping_views_warn_and_keep_their_values(view):
    x = vt.arange(6.0)
    v = view(x)
    with pytest.warns(UserWarning, match=r"obj\['a'\] and obj\['v'\] share memory"):
        out = _save({"a": x, "v": v})
    np.testing.assert_array_equal(out["a"].numpy(), x.numpy())
    np.testing.assert_array_equal(out["v"].numpy(), v.numpy())


def test_no_warning_for_one_tensor_twice_disjoint_slices_or_a_state_dict():
    x, y = vt.arange(6.0), vt.arange(4.0)
    model = vt.nn.TransformerEncoderLayer(16, 2, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _save({"a": y, "b": y, "lo": x[:3], "hi": x[3:], "e": vt.zeros(0),
                     "sd": model.state_dict(), "list": [vt.ones(2), vt.ones(2)]})
    assert out["a"] is out["b"]
    np.testing.assert_array_equal(out["hi"].numpy(), [3.0, 4.0, 5.0])
