"""Sequence-of-ints arguments (dims, shifts, shapes) read as torch 2.13's
argument parser reads them: a function whose signature takes ``int[]``
refuses a bare int, a float, a bool or a tensor (``torch.flip(x, 0)`` raises
TypeError), the method forms keep their varargs (``x.flip(0)``), and
mismatched pairs (``roll`` shifts vs dims, ``movedim`` source vs
destination, ``tensordot`` dims) raise instead of being zipped short.

Every case runs on real torch and on vm.torch: same exception type where
torch raises, same values where it computes.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")
import dragon_core.vm.torch as vt  # noqa: E402

X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

# (name, fn(lib, x)); fn runs with lib = torch or vm.torch
CASES = [
    ("flip_int", lambda m, x: m.flip(x, 0)),
    ("flip_kw_int", lambda m, x: m.flip(x, dims=0)),
    ("flip_tuple", lambda m, x: m.flip(x, (0, 2))),
    ("flip_float_elem", lambda m, x: m.flip(x, [0.0])),
    ("flip_bool_elem", lambda m, x: m.flip(x, [True])),
    ("flip_tensor", lambda m, x: m.flip(x, m.tensor([0]))),
    ("flip_np_array", lambda m, x: m.flip(x, np.array([0]))),
    ("flip_set", lambda m, x: x.flip({0})),
    ("flip_0d_tensor_elem", lambda m, x: m.flip(x, [m.tensor(1)])),
    ("method_flip_int", lambda m, x: x.flip(0)),
    ("method_flip_ints", lambda m, x: x.flip(0, 2)),
    ("method_flip_list", lambda m, x: x.flip([1, -1])),
    ("method_flip_kw_int", lambda m, x: x.flip(dims=0)),
    ("method_flip_float", lambda m, x: x.flip(0.0)),
    ("method_flip_repeat", lambda m, x: x.flip(0, 0)),
    ("permute_int", lambda m, x: m.permute(x[0, 0], 0)),
    ("permute_varargs_fn", lambda m, x: m.permute(x, 2, 0, 1)),
    ("permute_tuple", lambda m, x: m.permute(x, (2, 0, 1))),
    ("permute_bool_elems", lambda m, x: m.permute(x[0], [True, False])),
    ("permute_float_elems", lambda m, x: m.permute(x, [2.0, 0, 1])),
    ("method_permute", lambda m, x: x.permute(2, 0, 1)),
    ("method_permute_list", lambda m, x: x.permute([2, 0, 1])),
    ("method_permute_kw_int", lambda m, x: x[0, 0].permute(dims=0)),
    ("method_permute_float", lambda m, x: x.permute(2.0, 0, 1)),
    ("tile_int", lambda m, x: m.tile(x, 2)),
    ("tile_tuple", lambda m, x: m.tile(x, (2,))),
    ("tile_float_elem", lambda m, x: m.tile(x, (2.0,))),
    ("method_tile", lambda m, x: x.tile(2, 1)),
    ("roll_int_int", lambda m, x: m.roll(x, 1, 0)),
    ("roll_pairs", lambda m, x: m.roll(x, (1, -2), (0, 2))),
    ("roll_more_shifts", lambda m, x: m.roll(x, (1, 1), 0)),
    ("roll_more_dims", lambda m, x: m.roll(x, 1, (0, 1))),
    ("roll_float_shift", lambda m, x: m.roll(x, 1.5, 0)),
    ("roll_float_dim", lambda m, x: m.roll(x, [1], [0.0])),
    ("roll_flat", lambda m, x: m.roll(x, 5)),
    ("roll_flat_two_shifts", lambda m, x: m.roll(x, (1, 2))),
    ("movedim_ints", lambda m, x: m.movedim(x, 0, 2)),
    ("movedim_lists", lambda m, x: m.movedim(x, [0, 1], [2, 0])),
    ("movedim_mixed", lambda m, x: m.movedim(x, (0,), 1)),
    ("movedim_lengths", lambda m, x: m.movedim(x, [0], [1, 0])),
    ("movedim_repeated", lambda m, x: m.movedim(x, [0, 0], [1, 2])),
    ("tensordot_int", lambda m, x: m.tensordot(x, x.permute(2, 1, 0), 0)),
    ("tensordot_pairs", lambda m, x: m.tensordot(x, x, ([0, 1], [0, 1]))),
    ("tensordot_negative", lambda m, x: m.tensordot(x, x, ([-1], [2]))),
    ("tensordot_bare_ints", lambda m, x: m.tensordot(x, x, (0, 0))),
    ("tensordot_size_mismatch", lambda m, x: m.tensordot(x, x, ([0], [1]))),
    ("tensordot_repeated", lambda m, x: m.tensordot(x, x, ([0, 0], [0, 0]))),
    ("tensordot_negative_int", lambda m, x: m.tensordot(x, x, -1)),
    ("reshape_fn_int", lambda m, x: m.reshape(x, 24)),
    ("reshape_fn_varargs", lambda m, x: m.reshape(x, 6, 4)),
    ("reshape_fn_tuple", lambda m, x: m.reshape(x, (6, -1))),
    ("method_reshape", lambda m, x: x.reshape(6, 4)),
    ("broadcast_to_int", lambda m, x: m.broadcast_to(x[0, 0], 4)),
    ("broadcast_to_tuple", lambda m, x: m.broadcast_to(x[0, 0], (2, 4))),
    ("unflatten_int", lambda m, x: x.unflatten(2, 4)),
    ("unflatten_tuple", lambda m, x: x.unflatten(2, (2, -1))),
    ("sum_float_dim", lambda m, x: m.sum(x, 0.0)),
    ("sum_float_dims", lambda m, x: m.sum(x, [0.0])),
    ("amax_bool_dims", lambda m, x: m.amax(x, [True])),
    ("sum_dims", lambda m, x: m.sum(x, (0, -1))),
]


@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
def test_dims_argument_as_torch(name, fn):
    ref = err = None
    try:
        ref = fn(torch, torch.from_numpy(X.copy()))
    except Exception as e:  # noqa: BLE001 (the type is what is compared)
        err = e
    if err is not None:
        with pytest.raises(type(err)):
            fn(vt, vt.from_numpy(X.copy()))
        return
    out = fn(vt, vt.from_numpy(X.copy()))
    assert tuple(out.shape) == tuple(ref.shape)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())


def test_errors_name_the_op_and_shapes():
    x = vt.from_numpy(X.copy())
    with pytest.raises(TypeError, match=r"flip\(\): argument 'dims' \(position 2\) must be "
                                        r"tuple of ints, not int"):
        vt.flip(x, 0)
    with pytest.raises(RuntimeError, match=r"roll\(\).*shifts: 2, dims: 1.*\[2, 3, 4\]"):
        vt.roll(x, (1, 1), 0)
    with pytest.raises(RuntimeError, match=r"permute\(\).*\[2, 3, 4\]"):
        x.permute(1, 0)
