"""cpu_eigen's float32 -> bfloat16 conversion through AVX512-BF16's
vcvtneps2bf16 (plugins/cpu_eigen/src/cast.cc, issue 21) against the bit
arithmetic it replaces (cast.h FloatToBfloat16Bits: nearest, ties to even;
a NaN becomes the quiet NaN of its sign; subnormals rounded, not flushed).

The instruction reads subnormals as zero and quiets a NaN differently, so
those lanes are fixed up; checked here bit for bit against a NumPy model of
FloatToBfloat16Bits on every sign and exponent with every upper mantissa
half and the rounding cases of the lower half (ties, just above and below,
zero, all ones), NaN payloads, infinities, the subnormal range and overflow
to infinity; on dense Casts of every length mod 16 and on strided ones (a
transposed view: the row loop); and in fresh interpreters with the
instruction path off (DRAGON_CPU_EIGEN_CVT_BF16=0) and with the build capped
at x86-64-v3, which must give the same bytes. On a CPU without AVX512-BF16
every run takes the other paths and the checks still hold.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

import dragon_core as dg


def bf16_bits_reference(x: np.ndarray) -> np.ndarray:
    """FloatToBfloat16Bits in NumPy (uint32 arithmetic), as uint16."""
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    nan = ((u >> 16) & 0x8000) | 0x7FC0
    mag = u & 0x7FFFFFFF
    return np.where(mag > 0x7F800000, nan, rounded).astype(np.uint16)


def bit_patterns() -> np.ndarray:
    """Every upper half (sign, exponent, 7 mantissa bits) with the lower
    halves that decide the rounding, plus random patterns."""
    hi = np.arange(1 << 16, dtype=np.uint32) << 16
    lows = np.array([0x0000, 0x0001, 0x4000, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF],
                    np.uint32)
    rng = np.random.default_rng(21)
    pats = np.concatenate([(hi[:, None] | lows[None, :]).ravel(),
                           rng.integers(0, 1 << 32, 300_000, dtype=np.uint64).astype(np.uint32)])
    return pats.view(np.float32)


def _cast_bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(dg.ops.cast(dg.tensor(x), "bfloat16")).view(np.uint16)


def test_every_exponent_and_rounding_case_bitwise():
    x = bit_patterns()
    np.testing.assert_array_equal(_cast_bits(x), bf16_bits_reference(x))


@pytest.mark.parametrize("n", [1, 15, 16, 17, 31, 33, 1000, 4099])
def test_lengths_and_specials_in_every_lane(n):
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-40, -1e-40, 1e-45,
                         1.1754942e-38, 1.17549435e-38, 3.4028235e38, -3.4028235e38,
                         3.3961776e38, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8], np.float32)
    rng = np.random.default_rng(n)
    for shift in range(16):
        x = rng.standard_normal(n).astype(np.float32)
        k = min(n, len(specials))
        x[:k] = np.roll(specials, shift)[:k]
        np.testing.assert_array_equal(_cast_bits(x), bf16_bits_reference(x))


def test_strided_cast_rows_bitwise():
    """Transposed views: the strided Cast's row loop (FloatRowsToBfloat16),
    rows of every length mod 16."""
    x = bit_patterns()[:64 * 4103].reshape(64, 4103)
    got = np.asarray(dg.ops.cast(dg.ops.transpose(dg.tensor(x), (1, 0)), "bfloat16"))
    np.testing.assert_array_equal(got.view(np.uint16),
                                  bf16_bits_reference(np.ascontiguousarray(x.T)))
    for inner in (1, 15, 16, 17, 64, 100):
        y = bit_patterns()[: 8 * 6 * inner].reshape(8, 6, inner)
        got = np.asarray(dg.ops.cast(dg.ops.transpose(dg.tensor(y), (1, 0, 2)), "bfloat16"))
        np.testing.assert_array_equal(
            got.view(np.uint16),
            bf16_bits_reference(np.ascontiguousarray(y.transpose(1, 0, 2))))


_HASH = r"""
import hashlib, numpy as np, dragon_core as dg
import importlib.util, sys
spec = importlib.util.spec_from_file_location("t", sys.argv[1])
t = importlib.util.module_from_spec(spec); spec.loader.exec_module(t)
x = t.bit_patterns()
h = hashlib.sha256(np.asarray(dg.ops.cast(dg.tensor(x), "bfloat16")).tobytes())
y = dg.tensor(x[:64 * 4103].reshape(64, 4103))
h.update(np.asarray(dg.ops.cast(dg.ops.transpose(y, (1, 0)), "bfloat16")).tobytes())
print(h.hexdigest())
"""


def _hash(env_extra: dict) -> str:
    env = dict(os.environ)
    env.pop("DRAGON_CPU_EIGEN_CVT_BF16", None)
    env.pop("DRAGON_CPU_EIGEN_ISA", None)
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", _HASH, __file__], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_instruction_path_and_the_others_give_the_same_bytes():
    runs = {"best": {}, "insn off": {"DRAGON_CPU_EIGEN_CVT_BF16": "0"},
            "v3": {"DRAGON_CPU_EIGEN_ISA": "v3"}, "base": {"DRAGON_CPU_EIGEN_ISA": "base"}}
    hashes = {k: _hash(v) for k, v in runs.items()}
    assert len(set(hashes.values())) == 1, hashes
    x = bit_patterns()
    h = hashlib.sha256(bf16_bits_reference(x).tobytes())
    h.update(bf16_bits_reference(np.ascontiguousarray(x[:64 * 4103].reshape(64, 4103).T))
             .tobytes())
    assert hashes["best"] == h.hexdigest()
