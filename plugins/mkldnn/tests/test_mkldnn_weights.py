"""The AVX-512 weight transposes of the mkldnn plugin (src/weights.cc).

Convolution weights go from the core's dense [O, I, kh, kw] float32 into
oneDNN's OIhw16i16o for the forward convolution and into OIhw16o16i for the
deconvolution (ConvTranspose2d), and the filter gradient comes back from
OIhw16i16o, through the plugin's own transposes where O and I are multiples
of 16 (else oneDNN's reorder). A transpose moves bits, so the
results must be *bit for bit* those of oneDNN's reorder
(``DRAGON_MKLDNN_WEIGHT_REORDER=onednn``, read once per process: each
setting runs in a child) and match the float64 references of
``tests/ops/test_conv.py``. oneDNN's verbose log shows which path ran: with
the transposes on, the forward's plain -> ABcd16b16a reorder (kh * kw > 1)
and the filter gradient's ABcd16b16a -> plain reorder are gone from it.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]

# (x shape, w shape, attrs): channel counts multiples of 16 (served) with
# 1, 2x3, 3x3, 5x5 (25 taps) and 7x7 (49 taps, more than one 16-float chunk
# per tap row) filters, strides and groups-free padding; one with 24 input
# channels (not a multiple of 16: oneDNN's reorder, padded blocks).
CASES = [
    ((2, 32, 9, 8), (48, 32, 3, 3), {"pads": [1, 1]}),
    ((1, 16, 6, 7), (16, 16, 1, 1), {}),
    ((2, 16, 7, 9), (32, 16, 2, 3), {"strides": [2, 1], "pads": [1, 0]}),
    ((1, 32, 11, 10), (16, 32, 5, 5), {"pads": [2, 2]}),
    ((1, 16, 12, 12), (32, 16, 7, 7), {"pads": [3, 3], "strides": [2, 2]}),
    ((2, 24, 8, 8), (32, 24, 3, 3), {"pads": [1, 1]}),
]

_SCRIPT = r"""
import sys
import numpy as np
import dragon_core as dg
from tests.ops.test_conv import (backprop_filter_ref, conv2d_ref,
                                 conv_transpose2d_ref)
cases = %r
r = np.random.default_rng(0)
out = {}
for n, (xs, ws, a) in enumerate(cases):
    x = r.uniform(-1, 1, xs).astype(np.float32)
    w = r.uniform(-1, 1, ws).astype(np.float32)
    pa = dg.plugin_api.py_attrs("Conv2d", a)
    X, W = dg.tensor(x), dg.tensor(w)
    y = dg.ops.conv2d(X, W, **pa).numpy()
    t = dg.ops.conv_transpose2d(dg.tensor(y), W, **pa).numpy()
    f = dg.ops.conv2d_backprop_filter(X, dg.tensor(y), list(ws), **pa).numpy()
    x64, w64, y64 = x.astype(float), w.astype(float), y.astype(float)
    for got, want in [(y, conv2d_ref(x64, w64, **a)),
                      (t, conv_transpose2d_ref(y64, w64, **a)),
                      (f, backprop_filter_ref(x64, y64, ws, **a))]:
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale)
    out[f"y{n}"], out[f"t{n}"], out[f"f{n}"] = y, t, f
    # A frozen graph packs its constant weights once (call-site state) with
    # the same conversion: every run gives the eager bits.
    frozen = dg.function(lambda v: dg.ops.conv2d(v, W, **pa), freeze=True)
    for _ in range(3):
        np.testing.assert_array_equal(frozen(X).numpy(), y)
np.savez(sys.argv[1], **out)
print("ok")
"""


def _run(tmp_path, mode):
    """Runs every case in a child with DRAGON_MKLDNN_WEIGHT_REORDER=mode;
    returns (results, oneDNN's exec lines)."""
    env = dict(os.environ, ONEDNN_VERBOSE="1", DRAGON_MKLDNN_WEIGHT_REORDER=mode,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    path = tmp_path / f"{mode}.npz"
    done = subprocess.run([sys.executable, "-c", _SCRIPT % (CASES,), str(path)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
    execs = [ln for ln in done.stdout.splitlines() if ln.startswith("onednn_verbose,exec,cpu,")]
    with np.load(path) as z:
        return {k: z[k] for k in z.files}, execs


def _avx512() -> bool:
    flags = pathlib.Path("/proc/cpuinfo").read_text() if pathlib.Path("/proc/cpuinfo").exists() \
        else ""
    return " avx512f" in flags


def _reorders(execs, src, dst):
    """The reorder exec lines from format `src` to `dst` (padded or not:
    oneDNN writes ``src_f32:p:blocked`` for a padded block)."""
    src_re = re.compile(rf"src_f32:p?:blocked:{src}:")
    dst_re = re.compile(rf"dst_f32:p?:blocked:{dst}:")
    return [e for e in execs if ",reorder," in e and src_re.search(e) and dst_re.search(e)]


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("weights")
    return _run(tmp, "own"), _run(tmp, "onednn")


def test_same_bits_as_onednn_reorder(both):
    (own, _), (ref, _) = both
    assert own.keys() == ref.keys() and len(own) == 3 * len(CASES)
    for k in own:
        assert own[k].dtype == np.float32
        np.testing.assert_array_equal(own[k].view(np.uint32), ref[k].view(np.uint32), err_msg=k)


def test_onednn_mode_uses_onednn_reorders(both):
    _, (_, execs) = both
    assert _reorders(execs, "abcd", "ABcd16b16a"), "expected oneDNN's forward weight reorder"
    assert _reorders(execs, "ABcd16b16a", "abcd"), "expected oneDNN's filter-gradient reorder"


@pytest.mark.skipif(not _avx512(), reason="the transposes need AVX-512F; oneDNN reorders here")
def test_transposes_replace_the_reorders(both):
    (_, execs), _ = both
    fwd = _reorders(execs, "abcd", "ABcd16b16a")
    back = _reorders(execs, "ABcd16b16a", "abcd")
    # Left to oneDNN: the 1x1 forward (16x16x1x1; its jit:blk reorder is as
    # fast) and the 24-channel case (padded blocks, not served).
    assert all(",16x16x1x1," in e or "32x24x" in e for e in fwd), fwd
    assert all("32x24x" in e for e in back), back
    assert any("32x24x" in e for e in back), "the padded case must still reorder in oneDNN"
    # The deconvolution's filter (bacd -> BAcd16b16a): only the padded case.
    # Where oneDNN's deconvolution picks another filter format (its brgemm
    # kernels on Intel CPUs read Acdb16a / Acdb32a), the plugin transposes
    # none of them and both runs show the same reorders.
    _, (_, onednn_execs) = both
    if _reorders(onednn_execs, "bacd", "BAcd16b16a") and not _bacd_other(onednn_execs):
        deconv = _reorders(execs, "bacd", "BAcd16b16a")
        assert deconv and all("x32x3x3" in e and ",24x" in e for e in deconv), deconv
    else:
        assert _bacd_other(execs) == _bacd_other(onednn_execs)


def _bacd_other(execs):
    """The deconvolution filter reorders to formats other than BAcd16b16a,
    as (format, shape) pairs (oneDNN chooses the format per CPU)."""
    out = []
    for e in execs:
        m = re.search(r"src_f32:p?:blocked:bacd:.* dst_f32:p?:blocked:(\w+):.*,,([0-9x]+),", e)
        if ",reorder," in e and m and m.group(1) != "BAcd16b16a":
            out.append((m.group(1), m.group(2)))
    return out


def test_onednn_mode_reorders_deconvolution_filters(both):
    """With the transposes off, every deconvolution's filter goes through
    oneDNN's reorder (to BAcd16b16a on Zen 4; Acdb16a / Acdb32a where its
    brgemm kernels run)."""
    _, (_, execs) = both
    assert len(_reorders(execs, "bacd", "BAcd16b16a")) + len(_bacd_other(execs)) >= 4
