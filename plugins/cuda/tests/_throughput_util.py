"""Helpers of the cuda throughput tests (test_cuda_*_throughput.py): the
device under test, the skip without a GPU, and float64 round trips of
tensors rounded once to the dtype under test."""

from __future__ import annotations

import os

import numpy as np
import pytest

import dragon_core as dg

ops = dg.ops
#: The device under test: cuda, or cpu to check the tests' own references.
DEV = os.environ.get("DRAGON_CUDA_CONFORMANCE_DEVICE", "cuda")
HALF = ("float16", "bfloat16")


def need_device():
    """Skip (with the device's reason) where the device under test, cuda,
    does not exist."""
    if DEV != "cuda":
        return
    import dragon_cuda
    if dragon_cuda.device_count() == 0:
        pytest.skip(f"no cuda device: {dragon_cuda.unavailable_reason()}")


def skip_half(dtype: str, what: str) -> None:
    """Skip 16-bit float cases when the CPU is the device under test."""
    if dtype in HALF and DEV == "cpu":
        pytest.skip(f"the CPU has no 16-bit float {what} kernel")


def rounded64(arr, dtype: str) -> np.ndarray:
    """``arr`` rounded to ``dtype`` once, as float64 (a reference's input)."""
    t = ops.cast(dg.tensor(np.asarray(arr, np.float64)), dtype=dtype)
    if dtype in HALF:
        t = ops.cast(t, dtype="float32")
    return np.asarray(t.numpy(), np.float64)


def to_device(arr64, dtype: str, misaligned: bool = False):
    """A ``dtype`` tensor on the device under test holding ``arr64``; with
    ``misaligned`` its data starts one element into a buffer (a view)."""
    if misaligned:
        flat = ops.cast(dg.tensor(np.concatenate([[0.0], np.ravel(arr64)])), dtype=dtype)
        return flat.to(DEV)[1:].reshape(np.shape(arr64))
    return ops.cast(dg.tensor(np.asarray(arr64, np.float64)), dtype=dtype).to(DEV)


def host64(t) -> np.ndarray:
    """A tensor's values on the host as float64."""
    t = t.to("cpu")
    if str(t.dtype) in HALF:
        t = ops.cast(t, dtype="float32")
    return np.asarray(t.numpy(), np.float64)
