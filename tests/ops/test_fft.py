"""The DFT family (Fft, Ifft, Rfft, Irfft; docs/ops.md, "Spectral") against
numpy.fft in float64, and the spectral functions built on it (dft and stft
with ONNX semantics, the window generators, mel_weight_matrix)."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import HALF_DTYPES, op_case

import dragon_core as dg
from dragon_core.errors import InvalidArgumentError

from ._common import sample

NORMS = ("backward", "ortho", "forward")


def _c(a):
    """Trailing (real, imaginary) axis -> complex128."""
    return a[..., 0].astype(np.float64) + 1j * a[..., 1].astype(np.float64)


def _r(z):
    """complex -> trailing (real, imaginary) axis."""
    return np.stack([z.real, z.imag], -1)


def _fft_ref(x, n=None, axis=-1, norm="backward"):
    return _r(np.fft.fft(_c(x), n, axis, norm))


def _ifft_ref(x, n=None, axis=-1, norm="backward"):
    return _r(np.fft.ifft(_c(x), n, axis, norm))


def _rfft_ref(x, n=None, axis=-1, norm="backward"):
    return _r(np.fft.rfft(x.astype(np.float64), n, axis, norm))


def _irfft_ref(x, n=None, axis=-1, norm="backward"):
    return np.fft.irfft(_c(x), n, axis, norm)


# Complex shapes (trailing 2): length 1, primes (Bluestein), 2/3/5-smooth
# lengths, an empty batch, 3-D, and one long enough for the parallel path.
C_SHAPES = [(1, 2), (2, 2), (7, 2), (12, 2), (3, 13, 2), (0, 8, 2), (2, 3, 10, 2),
            (4, 97, 2), (3, 240, 2), (64, 60, 2)]
R_SHAPES = [(1,), (2,), (7,), (12,), (3, 13), (0, 8), (2, 3, 10), (4, 97), (64, 60)]
ATTRS = [{}, {"axis": 0}, {"axis": -2}, {"n": 5}, {"n": 16, "axis": 0}, {"n": 1},
         {"norm": "ortho"}, {"norm": "forward", "n": 11}, {"norm": "ortho", "axis": 1}]


def _ok(case, complex_input=True):
    rank = len(case.shape) - (1 if complex_input else 0)
    axis = case.attrs.get("axis", -1)
    if not -rank <= axis < rank:
        return False
    return case.attrs.get("n") is not None or case.shape[axis % rank] > 0


def _complex_ok(case):
    return _ok(case)


def _real_ok(case):
    return _ok(case, complex_input=False)


def _irfft_ok(case):
    if not _ok(case):
        return False
    rank = len(case.shape) - 1
    m = case.shape[case.attrs.get("axis", -1) % rank]
    return case.attrs.get("n") is not None or m > 1


def _inputs(rng, dt, shape):
    return [sample(rng, dt, shape)]


@op_case("Fft", inputs=_inputs, reference=_fft_ref, shapes=C_SHAPES, attrs=ATTRS,
         select=_complex_ok, tol=4)
def test_fft(case):
    case.check_forward()


@op_case("Ifft", inputs=_inputs, reference=_ifft_ref, shapes=C_SHAPES, attrs=ATTRS,
         select=_complex_ok, tol=4)
def test_ifft(case):
    case.check_forward()


@op_case("Rfft", inputs=_inputs, reference=_rfft_ref, shapes=R_SHAPES, attrs=ATTRS,
         select=_real_ok, tol=4)
def test_rfft(case):
    case.check_forward()


@op_case("Irfft", inputs=_inputs, reference=_irfft_ref, shapes=C_SHAPES,
         attrs=ATTRS + [{"n": 12}, {"n": 3, "axis": 0}], select=_irfft_ok, tol=4)
def test_irfft(case):
    case.check_forward()


@op_case("Fft", inputs=_inputs, reference=_fft_ref, dtypes=HALF_DTYPES,
         shapes=[(7, 2), (3, 16, 2)], attrs=[{}, {"norm": "ortho", "n": 9}])
def test_fft_half(case):
    """float16 / bfloat16 compute in float32, rounded once."""
    case.check_forward()


@op_case("Irfft", inputs=_inputs, reference=_irfft_ref, dtypes=HALF_DTYPES,
         shapes=[(5, 2), (3, 9, 2)], attrs=[{}, {"n": 7, "norm": "forward"}])
def test_irfft_half(case):
    case.check_forward()


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 9, 16, 17, 25, 27, 31, 49, 64, 81, 100,
                               125, 127, 128, 243, 256, 257, 360, 625, 1000, 1021, 1024,
                               2048, 4093, 6561, 8192, 15625])
def test_fft_lengths_float64(n):
    """Every radix (2, 3, 4, 5), their mixtures and Bluestein (primes, 7^2),
    accurate to float64 rounding: the error stays at a few ulps of the
    largest magnitude, O(log n), as an O(n log n) FFT's does."""
    rng = np.random.default_rng(n)
    z = rng.standard_normal((2, n)) + 1j * rng.standard_normal((2, n))
    for fn, ref in ((dg.ops.fft, np.fft.fft), (dg.ops.ifft, np.fft.ifft)):
        got = _c(fn(dg.tensor(_r(z))).numpy())
        want = ref(z)
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < 1e-14 * max(1.0, np.log2(n)), (fn.__name__, n, err)
    back = dg.ops.ifft(dg.ops.fft(dg.tensor(_r(z)))).numpy()
    np.testing.assert_allclose(_c(back), z, rtol=0, atol=1e-13 * np.log2(n + 1))


def test_fft_float32_matches_numpy_rounding_at_zero():
    """numpy computes complex64 in float32; the inverse DFT of ONNX's node
    test (ramp input, n = 10) has exact zeros whose float32 values are
    rounding noise (2^-19 / 10). Dragon's float32 FFT rounds the same way."""
    z = np.arange(0, 100, dtype=np.complex64).reshape(10, 10)
    want = np.fft.ifft(z, axis=0)
    got = dg.ops.ifft(dg.tensor(_r(z).astype(np.float32)), axis=0).numpy()
    np.testing.assert_allclose(got, _r(want).astype(np.float32), rtol=1e-3, atol=1e-7)


def test_known_values():
    """Hand-checked transforms: a unit impulse has a flat spectrum; a cosine
    of frequency 1 over 4 samples puts n/2 at frequencies 1 and 3."""
    imp = np.zeros((5, 2))
    imp[0, 0] = 1.0
    np.testing.assert_allclose(dg.ops.fft(dg.tensor(imp)).numpy(),
                               np.stack([np.ones(5), np.zeros(5)], -1), atol=1e-15)
    cos = np.array([1.0, 0.0, -1.0, 0.0])
    np.testing.assert_allclose(dg.ops.rfft(dg.tensor(cos)).numpy(),
                               [[0, 0], [2, 0], [0, 0]], atol=1e-15)
    np.testing.assert_allclose(dg.ops.irfft(dg.tensor(np.array([[0., 0], [2, 0], [0, 0]]))
                                            ).numpy(), cos, atol=1e-15)


def test_irfft_ignores_imaginary_dc_and_nyquist():
    x = np.array([[1.0, 5.0], [2.0, 3.0], [4.0, -7.0]])
    want = np.fft.irfft(_c(x))
    np.testing.assert_allclose(dg.ops.irfft(dg.tensor(x)).numpy(), want, atol=1e-14)


def test_graph_mode_matches_eager():
    x = dg.tensor(sample(np.random.default_rng(3), "float64", (4, 12, 2)))

    @dg.function
    def f(t):
        return dg.ops.irfft(dg.ops.fft(t, 22, 0, "ortho"), 20, 1)

    np.testing.assert_allclose(f(x).numpy(),
                               dg.ops.irfft(dg.ops.fft(x, 22, 0, "ortho"), 20, 1).numpy(),
                               rtol=0, atol=0)


@pytest.mark.parametrize("call, match", [
    (lambda: dg.ops.fft(dg.tensor(np.zeros((4, 3)))), "last axis has size 2"),
    (lambda: dg.ops.fft(dg.tensor(np.zeros((2,)))), "at least one axis"),
    (lambda: dg.ops.fft(dg.tensor(np.zeros((4, 2))), axis=1), "out of range"),
    (lambda: dg.ops.fft(dg.tensor(np.zeros((4, 2))), 0), "at least 1"),
    (lambda: dg.ops.fft(dg.tensor(np.zeros((0, 2)))), "at least 1"),
    (lambda: dg.ops.ifft(dg.tensor(np.zeros((4, 2))), norm="unit"), "norm must be"),
    (lambda: dg.ops.rfft(dg.tensor(np.float64(1.0))), "rank 0"),
    (lambda: dg.ops.irfft(dg.tensor(np.zeros((1, 2)))), "at least 1"),
    (lambda: dg.ops.fft(dg.tensor(np.zeros((4, 2), np.int32))), "Fft"),
])
def test_errors(call, match):
    with pytest.raises((InvalidArgumentError, ValueError, TypeError), match=match):
        call()


def test_error_names_the_op_and_shape():
    with pytest.raises(ValueError) as e:
        dg.ops.irfft(dg.tensor(np.zeros((3, 4))))
    assert "Irfft" in str(e.value) and "[3, 4]" in str(e.value)


# -------------------------------------------------------- ONNX DFT semantics

def _onnx_dft(x, dft_length=None, axis=-2, inverse=False, onesided=False):
    """ONNX's DFT in float64 (its reference implementation's meaning)."""
    axis %= x.ndim
    sig = x[..., 0].astype(np.float64) + (1j * x[..., 1] if x.shape[-1] == 2 else 0)
    if dft_length is None:
        dft_length = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    if inverse:
        if onesided:
            return np.fft.irfft(sig, dft_length, axis)[..., None]
        return _r(np.fft.ifft(sig, dft_length, axis))
    y = np.fft.fft(sig, dft_length, axis)
    if onesided:
        y = np.take(y, np.arange(dft_length // 2 + 1), axis)
    return _r(y)


@pytest.mark.parametrize("last", [1, 2])
@pytest.mark.parametrize("kw", [{}, {"axis": 1}, {"axis": -3}, {"dft_length": 7},
                                {"dft_length": 3, "axis": 1}, {"onesided": True},
                                {"onesided": True, "dft_length": 9, "axis": 1},
                                {"inverse": True}, {"inverse": True, "dft_length": 12},
                                {"inverse": True, "onesided": True},
                                {"inverse": True, "onesided": True, "dft_length": 7,
                                 "axis": 1}], ids=str)
def test_dft_onnx_semantics(last, kw):
    x = sample(np.random.default_rng(7), "float64", (2, 5, 6, last))
    got = dg.ops.dft(dg.tensor(x), **kw).numpy()
    np.testing.assert_allclose(got, _onnx_dft(x, **kw), rtol=1e-12, atol=1e-12)


def test_dft_errors():
    with pytest.raises(InvalidArgumentError, match="DFT: .*last axis of size 1"):
        dg.ops.dft(dg.tensor(np.zeros((3, 4))))
    with pytest.raises(InvalidArgumentError, match="DFT: axis -1"):
        dg.ops.dft(dg.tensor(np.zeros((3, 2))), axis=-1)
    with pytest.raises(InvalidArgumentError, match="dft_length"):
        dg.ops.dft(dg.tensor(np.zeros((3, 2))), dft_length=0)


# ------------------------------------------------------------------- STFT

def _stft_ref(signal, step, window, frame_length, onesided):
    sig = signal[..., 0] + (1j * signal[..., 1] if signal.shape[-1] == 2 else 0)
    frames = 1 + (sig.shape[1] - frame_length) // step
    out = []
    for t in range(frames):
        seg = sig[:, t * step:t * step + frame_length]
        if window is not None:
            seg = seg * window
        y = np.fft.fft(seg, axis=-1)
        out.append(y[:, :frame_length // 2 + 1] if onesided else y)
    return _r(np.stack(out, 1))


@pytest.mark.parametrize("last", [1, 2])
@pytest.mark.parametrize("step, frame_length, use_window, onesided",
                         [(8, 16, False, True), (8, 16, True, True), (5, 13, True, False),
                          (1, 1, False, True), (3, 40, True, True), (40, 40, False, False)])
def test_stft(last, step, frame_length, use_window, onesided):
    rng = np.random.default_rng(11)
    signal = rng.standard_normal((2, 40, last))
    window = dg.ops.hann_window(frame_length, dtype="float64").numpy() if use_window else None
    got = dg.ops.stft(dg.tensor(signal), step, None if window is None else dg.tensor(window),
                      frame_length, onesided).numpy()
    np.testing.assert_allclose(got, _stft_ref(signal, step, window, frame_length, onesided),
                               rtol=1e-12, atol=1e-12)


def test_stft_errors():
    s = dg.tensor(np.zeros((1, 8, 1)))
    with pytest.raises(InvalidArgumentError, match="STFT: frame_step"):
        dg.ops.stft(s, 0, frame_length=4)
    with pytest.raises(InvalidArgumentError, match="STFT: frame_length 9"):
        dg.ops.stft(s, 1, frame_length=9)
    with pytest.raises(InvalidArgumentError, match="window has 3 samples"):
        dg.ops.stft(s, 1, dg.tensor(np.ones(3)), 4)
    with pytest.raises(InvalidArgumentError, match=r"\[batch, length, 1 or 2\]"):
        dg.ops.stft(dg.tensor(np.zeros((8, 1))), 1)


# ---------------------------------------------------------------- windows

@pytest.mark.parametrize("size", [0, 1, 2, 7, 16])
@pytest.mark.parametrize("periodic", [True, False])
def test_windows(size, periodic):
    N = size if periodic else size - 1
    k = np.arange(size)
    if N > 0:
        t = 2 * np.pi * k / N
        refs = {"hann": 0.5 - 0.5 * np.cos(t),
                "hamming": 25 / 46 - 21 / 46 * np.cos(t),
                "blackman": 0.42 - 0.5 * np.cos(t) + 0.08 * np.cos(2 * t)}
    else:
        refs = {name: np.ones(size) for name in ("hann", "hamming", "blackman")}
    if not periodic and size > 1:  # numpy's windows are the symmetric ones
        np.testing.assert_allclose(refs["hann"], np.hanning(size), atol=1e-15)
        np.testing.assert_allclose(refs["hamming"], np.hamming(size), atol=0.01)
        np.testing.assert_allclose(refs["blackman"], np.blackman(size), atol=1e-15)
    for name, ref in refs.items():
        fn = getattr(dg.ops, f"{name}_window")
        w64 = fn(size, periodic, dtype="float64")
        np.testing.assert_allclose(w64.numpy(), ref, rtol=0, atol=1e-15)
        w32 = fn(size, periodic)
        assert w32.dtype == "float32" and w32.shape == (size,)
        np.testing.assert_array_equal(w32.numpy(), ref.astype(np.float32))


def test_mel_weight_matrix_matches_onnx_example():
    """ONNX's MelWeightMatrix example (8 bins, dft_length 16, 8192 Hz, 0 to
    4096 Hz): triangles on the spectrogram bins the mel scale picks."""
    w = dg.ops.mel_weight_matrix(8, 16, 8192, 0.0, 4096.0).numpy()
    assert w.shape == (9, 8) and w.dtype == np.float32
    bins = np.arange(10)
    low, high = 0.0, 2595 * np.log10(1 + 4096 / 700)
    hz = 700 * (10 ** ((bins * (high - low) / 10 + low) / 2595) - 1)
    edges = ((17 * hz) // 8192).astype(int)
    want = np.zeros((9, 8))
    for i in range(8):
        lo, mid, hi = edges[i:i + 3]
        if mid == lo:
            want[mid, i] = 1
        else:
            for j in range(lo, mid + 1):
                want[j, i] = (j - lo) / (mid - lo)
        for j in range(mid, hi):
            want[j, i] = (hi - j) / (hi - mid)
    np.testing.assert_allclose(w, want, atol=1e-7)
    with pytest.raises(InvalidArgumentError, match="MelWeightMatrix"):
        dg.ops.mel_weight_matrix(8, 16, 8192, 100.0, 50.0)


def test_shape_inference_matches():
    x = dg.tensor(np.zeros((3, 10, 2), np.float32))
    assert dg.ops.fft(x, 7, 0).shape == (7, 10, 2)
    assert dg.ops.rfft(dg.tensor(np.zeros((3, 10))), 9).shape == (3, 5, 2)
    assert dg.ops.irfft(x, axis=1).shape == (3, 18)
    assert dg.ops.irfft(x, 5, 0).shape == (5, 10)
