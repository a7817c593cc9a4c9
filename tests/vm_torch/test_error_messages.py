"""Errors of vm.torch name the op and the shapes / dtypes involved (the
brief's rule), keeping torch's exception types and message prefixes."""

from __future__ import annotations

import pytest

import dragon_core.vm.torch as vt


@pytest.mark.parametrize("fn,exc,pattern", [
    (lambda: vt.tensor([1, 2]) // vt.tensor([1, 0]), RuntimeError,
     r"ZeroDivisionError: floor_divide of torch.int64 tensors.*\[2\] and \[2\]"),
    (lambda: vt.topk(vt.zeros(3), 4), RuntimeError, r"topk: selected index k out of range.*\[3\]"),
    (lambda: vt.zeros(2, 3).repeat(2), RuntimeError, r"repeat\(2,\) of a tensor of shape \[2, 3\]"),
    (lambda: vt.gather(vt.zeros(2, 3), 1, vt.zeros(2, dtype=vt.int64)), RuntimeError,
     r"gather: .*index \[2\], input \[2, 3\]"),
    (lambda: vt.matmul(vt.zeros(()), vt.zeros(3)), RuntimeError, r"0D and 1D.*\[\] and \[3\]"),
    (lambda: vt.mm(vt.zeros(3), vt.zeros(3, 2)), RuntimeError, r"self must be a matrix.*\[3\]"),
    (lambda: vt.bmm(vt.zeros(2, 3), vt.zeros(2, 3, 4)), RuntimeError, r"batch1.*\[2, 3\]"),
    (lambda: vt.zeros(3)[vt.tensor([0.0])], IndexError, r"float32 index of shape \[1\]"),
    (lambda: vt.zeros(3)[::-1], ValueError, r"slice\(None, None, -1\).*flip"),
])
def test_error_names_op_and_shapes(fn, exc, pattern):
    with pytest.raises(exc, match=pattern):
        fn()
