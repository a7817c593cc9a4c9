"""Shared by the vision_ops tests: whether a CUDA device exists to run the
CUDA kernels on (they are compiled wherever nvcc is; no GPU is needed to
build them)."""

import pytest

import dragon_core as dg

#: A ``cuda`` device is registered and present.
CUDA = any(d["name"] == "cuda" and d["count"] > 0 for d in dg.plugins.devices())

#: Marks a device test: it runs the CUDA kernels and skips only without a device.
requires_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device")
