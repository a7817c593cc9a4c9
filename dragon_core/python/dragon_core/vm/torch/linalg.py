"""``torch.linalg``: norms (differentiable, composed of ops) and host
solvers (``inv``, ``det``, ``solve``, ``svd``, ...) that refuse tensors
recorded by autograd rather than return gradient-less results.

The host solvers run NumPy's LAPACK on float32 / float64 inputs only (torch
raises for integer, bool and 16-bit inputs; NumPy would silently compute
in float64). Results come back with torch's named-tuple fields
(``eigh(A).eigenvalues``, ``slogdet(A).logabsdet``, ``qr(A).R``,
``svd(A).S``). Where LAPACK's answer on a non-finite input is an artefact
(NumPy's ``det`` of a matrix holding NaN is 0, its ``inv`` raises
"singular"), the NaN is propagated as torch does (det, slogdet, inv,
solve), and the decompositions whose result would be meaningless
(cholesky, eigh, eigvalsh, svd, svdvals, pinv, matrix_rank, the 2 / -2 /
nuclear matrix norms) raise naming the op, the shape and the dtype."""

from __future__ import annotations

import collections
import numbers

import numpy as np

from ._creation import _from_numpy_owned
from ._functions import _EXPORTS
from ._tensor import _records

_norm = _EXPORTS["norm"]
matmul = _EXPORTS["matmul"]

_INF = float("inf")

SlogdetResult = collections.namedtuple("linalg_slogdet", ["sign", "logabsdet"])
EighResult = collections.namedtuple("linalg_eigh", ["eigenvalues", "eigenvectors"])
QRResult = collections.namedtuple("linalg_qr", ["Q", "R"])
SVDResult = collections.namedtuple("linalg_svd", ["U", "S", "Vh"])
LstsqResult = collections.namedtuple("linalg_lstsq",
                                     ["solution", "residuals", "rank", "singular_values"])


def _desc(a) -> str:
    return f"shape {list(a.shape)}, dtype {str(a.dtype).replace('torch.', '')}"


def _dtname(a) -> str:
    return str(a.dtype).replace("torch.", "")


def _host_in(fn_name, a, *, square=True, min_dim=2):
    """The NumPy array of tensor ``a`` for a host solver, after torch's
    checks: not recorded by autograd, float32/float64, at least ``min_dim``
    dims, (batches of) square matrices where ``square``."""
    if not hasattr(a, "_t"):
        raise TypeError(f"torch.linalg.{fn_name}: expected a Tensor, got {type(a).__name__}")
    if _records(a._t):
        raise NotImplementedError(
            f"torch.linalg.{fn_name} has no gradient in dragon_core.vm.torch yet; call "
            "it under torch.no_grad() or on .detach()")
    if _dtname(a) not in ("float32", "float64"):
        raise TypeError(f"torch.linalg.{fn_name}: expected a float32 or float64 tensor "
                        f"(got {_desc(a)}; torch raises for integer, bool and 16-bit "
                        "inputs too); cast with .double() or .float() first")
    if a.ndim < min_dim:
        raise ValueError(f"torch.linalg.{fn_name}: the input must have at least {min_dim} "
                         f"dimensions (got {_desc(a)})")
    if square and a.shape[-1] != a.shape[-2]:
        raise ValueError(f"torch.linalg.{fn_name}: expected (a batch of) square matrices "
                         f"(got {_desc(a)})")
    t = a._t
    return t.cpu().numpy() if t._device_name != "cpu" else t.numpy()


def _finite_or_raise(fn_name, a, arr):
    if arr.size and not np.isfinite(arr).all():
        raise RuntimeError(f"torch.linalg.{fn_name}: the input ({_desc(a)}) contains NaN or "
                           "infinity; the decomposition is undefined")


def _out(arr, dtype):
    return _from_numpy_owned(np.asarray(arr, dtype=dtype))


def _nan_mats(arr):
    """Boolean mask over the batch: which matrices hold a NaN."""
    return np.isnan(arr).any(axis=(-1, -2))


def _linalg_error(fn_name, a, e):
    return RuntimeError(f"torch.linalg.{fn_name}: {e} (input {_desc(a)}); torch raises "
                        "here too (torch.linalg.{fn_name}_ex / pinv / lstsq for singular "
                        "inputs)".replace("{fn_name}", fn_name))


# ------------------------------------------------------------ determinants
def det(A):
    arr = _host_in("det", A)
    nan = _nan_mats(arr)
    with np.errstate(all="ignore"):
        r = np.linalg.det(np.where(nan[..., None, None], 1.0, arr).astype(arr.dtype))
    return _out(np.where(nan, np.nan, r), arr.dtype)


def slogdet(A):
    arr = _host_in("slogdet", A)
    nan = _nan_mats(arr)
    with np.errstate(all="ignore"):
        s, l = np.linalg.slogdet(np.where(nan[..., None, None], 1.0, arr).astype(arr.dtype))
    return SlogdetResult(_out(np.where(nan, np.nan, s), arr.dtype),
                         _out(np.where(nan, np.nan, l), arr.dtype))


# ------------------------------------------------------------ inverses, solves
def inv(A):
    arr = _host_in("inv", A)
    nan = _nan_mats(arr)
    try:
        r = np.linalg.inv(np.where(nan[..., None, None], np.eye(arr.shape[-1], dtype=arr.dtype),
                                   arr) if nan.any() else arr)
    except np.linalg.LinAlgError as e:
        raise _linalg_error("inv", A, f"the matrix is singular ({e})") from None
    return _out(np.where(nan[..., None, None], np.nan, r), arr.dtype)


def solve(A, B, *, left=True, out=None):
    if out is not None:
        raise NotImplementedError("torch.linalg.solve(out=...) is not supported; assign the "
                                  "result instead")
    a = _host_in("solve", A)
    b = _host_in("solve", B, square=False, min_dim=1)
    if a.dtype != b.dtype:
        raise TypeError(f"torch.linalg.solve: A and B must have the same dtype (A: {_desc(A)}, "
                        f"B: {_desc(B)})")
    if not left:   # X A = B  <=>  A^T X^T = B^T
        if b.ndim < 2:
            raise ValueError(f"torch.linalg.solve(left=False): B must be a matrix (got "
                             f"{_desc(B)})")
        x = solve(_from_numpy_owned(np.swapaxes(a, -1, -2).copy()),
                  _from_numpy_owned(np.swapaxes(b, -1, -2).copy()))
        return _from_numpy_owned(np.swapaxes(x._t.numpy(), -1, -2).copy())
    # torch's rule: B is a (batch of) vector(s) when it is 1-D, or has one dim
    # fewer than A and the same leading shape as A without its last dim
    vector = b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])
    bm = b[..., None] if vector else b
    if bm.shape[-2] != a.shape[-1]:
        raise ValueError(f"torch.linalg.solve: incompatible shapes A {list(A.shape)} and B "
                         f"{list(B.shape)} ({'vector' if vector else 'matrix'} right-hand "
                         "side)")
    try:
        batch = np.broadcast_shapes(a.shape[:-2], bm.shape[:-2])
    except ValueError:
        raise ValueError(f"torch.linalg.solve: the batch dims of A {list(A.shape)} and B "
                         f"{list(B.shape)} do not broadcast") from None
    a = np.broadcast_to(a, batch + a.shape[-2:])
    bm = np.broadcast_to(bm, batch + bm.shape[-2:])
    nan = _nan_mats(a) | _nan_mats(bm)
    if nan.any():
        a = np.where(nan[..., None, None], np.eye(a.shape[-1], dtype=a.dtype), a)
    try:
        x = np.linalg.solve(a, bm) if a.size and bm.size else np.zeros(bm.shape, a.dtype)
    except np.linalg.LinAlgError as e:
        raise _linalg_error("solve", A, f"the matrix is singular ({e})") from None
    x = np.where(nan[..., None, None], np.nan, x)
    return _out(x[..., 0] if vector else x, a.dtype)


def pinv(A, *, atol=None, rtol=None, hermitian=False, out=None):
    if out is not None:
        raise NotImplementedError("torch.linalg.pinv(out=...) is not supported")
    arr = _host_in("pinv", A, square=hermitian)
    _finite_or_raise("pinv", A, arr)
    m, n = arr.shape[-2:]
    if arr.size == 0:
        return _out(np.zeros(arr.shape[:-2] + (n, m)), arr.dtype)
    if hermitian:
        w, v = np.linalg.eigh(arr)
        s = np.abs(w)
        tol = _tolerance(s.max(-1, keepdims=True), atol, rtol, arr.dtype, m, n)
        inv_w = np.where(s > tol, 1.0 / np.where(s > tol, w, 1.0), 0.0)
        r = (v * inv_w[..., None, :]) @ np.swapaxes(v, -1, -2)
    else:
        u, s, vh = np.linalg.svd(arr, full_matrices=False)
        tol = _tolerance(s[..., :1], atol, rtol, arr.dtype, m, n)
        inv_s = np.where(s > tol, 1.0 / np.where(s > tol, s, 1.0), 0.0)
        r = (np.swapaxes(vh, -1, -2) * inv_s[..., None, :]) @ np.swapaxes(u, -1, -2)
    return _out(r, arr.dtype)


def _tolerance(smax, atol, rtol, dtype, m, n):
    """torch's threshold: max(atol, rtol * largest singular value); rtol
    defaults to eps * max(m, n) when atol is not given (or is 0), else 0."""
    def val(v):
        if v is None:
            return None
        if hasattr(v, "_t"):
            return v._t.numpy()[..., None]
        return float(v)
    atol, rtol = val(atol), val(rtol)
    if rtol is None:
        rtol = np.finfo(dtype).eps * max(m, n) if atol is None or np.all(atol == 0) else 0.0
    return np.maximum(0.0 if atol is None else atol, rtol * smax)


def matrix_rank(A, *, atol=None, rtol=None, hermitian=False, tol=None):
    if tol is not None:   # torch's deprecated spelling: an absolute tolerance
        atol, rtol = tol, 0.0
    arr = _host_in("matrix_rank", A, square=hermitian)
    _finite_or_raise("matrix_rank", A, arr)
    m, n = arr.shape[-2:]
    if arr.size == 0:
        return _out(np.zeros(arr.shape[:-2]), np.int64)
    s = np.abs(np.linalg.eigvalsh(arr)) if hermitian else np.linalg.svd(arr, compute_uv=False)
    tol_ = _tolerance(s.max(-1, keepdims=True), atol, rtol, arr.dtype, m, n)
    return _out((s > tol_).sum(-1), np.int64)


def lstsq(A, B, rcond=None, *, driver=None):
    """Least squares on the host (no gradient), the minimum-norm solution
    (NumPy's SVD-based solver, LAPACK gelsd), with torch's fields per driver:
    ``rank`` for gelsy (the CPU default), gelsd and gelss; the singular
    values for gelsd and gelss; the squared residuals (per column) for the
    drivers other than gelsy when m > n and every matrix has full rank."""
    drivers = ("gelsy", "gelsd", "gelss", "gels")
    if driver is None:
        driver = "gelsy"
    if driver not in drivers:
        raise ValueError(f"torch.linalg.lstsq: driver must be one of {drivers} (got "
                         f"{driver!r})")
    a = _host_in("lstsq", A, square=False)
    b = _host_in("lstsq", B, square=False, min_dim=1)
    if a.dtype != b.dtype:
        raise TypeError(f"torch.linalg.lstsq: A and B must have the same dtype (A: {_desc(A)}, "
                        f"B: {_desc(B)})")
    # torch's rule here (not solve's): B is a (batch of) vector(s) when it has
    # one dim fewer than A, and may not have fewer than that
    if not 0 <= a.ndim - b.ndim <= 1:
        raise ValueError(f"torch.linalg.lstsq: B must have as many dims as A or one fewer "
                         f"(A {list(A.shape)}, B {list(B.shape)})")
    vector = b.ndim == a.ndim - 1
    bm = b[..., None] if vector else b
    m, n = a.shape[-2:]
    if bm.shape[-2] != m:
        raise ValueError(f"torch.linalg.lstsq: A {list(A.shape)} and B {list(B.shape)} need "
                         "the same number of rows")
    try:
        batch = np.broadcast_shapes(a.shape[:-2], bm.shape[:-2])
    except ValueError:
        raise ValueError(f"torch.linalg.lstsq: the batch dims of A {list(A.shape)} and B "
                         f"{list(B.shape)} do not broadcast") from None
    _finite_or_raise("lstsq", A, a)
    k = bm.shape[-1]
    count = int(np.prod(batch, dtype=np.int64))
    a = np.broadcast_to(a, batch + (m, n)).reshape((count, m, n))
    bm = np.broadcast_to(bm, batch + (m, k)).reshape((count, m, k))
    rc = np.finfo(a.dtype).eps * max(m, n) if rcond is None else float(rcond)
    sol = np.zeros((len(a), n, k), a.dtype)
    ranks = np.zeros(len(a), np.int64)
    svals = np.zeros((len(a), min(m, n)), a.dtype)
    for i in range(len(a)):
        if a[i].size == 0:
            continue
        x, _, r, sv = np.linalg.lstsq(a[i], bm[i], rcond=rc)
        sol[i], ranks[i], svals[i] = x, r, sv
    full = bool((ranks == min(m, n)).all())
    res = np.zeros((0,), a.dtype)
    if driver != "gelsy" and m > n and full:
        # (per column, also for a vector B: torch keeps its column axis)
        res = (((a @ sol) - bm) ** 2).sum(-2).reshape(batch + (k,))
    sol = sol.reshape(batch + (n, k))
    return LstsqResult(
        _out(sol[..., 0] if vector else sol, a.dtype), _out(res, a.dtype),
        _out(ranks.reshape(batch) if driver != "gels" else np.zeros((0,)), np.int64),
        _out(svals.reshape(batch + (min(m, n),)) if driver in ("gelsd", "gelss")
             else np.zeros((0,)), a.dtype))


# ------------------------------------------------------------ decompositions
def cholesky(A, *, upper=False, out=None):
    if out is not None:
        raise NotImplementedError("torch.linalg.cholesky(out=...) is not supported")
    arr = _host_in("cholesky", A)
    _finite_or_raise("cholesky", A, arr)
    # LAPACK reads one triangle only, as torch does: the upper one for upper=True
    sym = _sym_from(arr, "U" if upper else "L")
    try:
        r = np.linalg.cholesky(sym)
    except np.linalg.LinAlgError as e:
        raise _linalg_error("cholesky", A, f"the input is not positive-definite ({e})") \
            from None
    if upper:
        r = np.swapaxes(r, -1, -2)
    return _out(r, arr.dtype)


def _sym_from(arr, UPLO):
    if UPLO not in ("L", "U"):
        raise ValueError(f"UPLO must be 'L' or 'U' (got {UPLO!r})")
    if UPLO == "L":
        return np.tril(arr) + np.swapaxes(np.tril(arr, -1), -1, -2)
    return np.triu(arr) + np.swapaxes(np.triu(arr, 1), -1, -2)


def eigh(A, UPLO="L", *, out=None):
    arr = _host_in("eigh", A)
    _finite_or_raise("eigh", A, arr)
    w, v = np.linalg.eigh(_sym_from(arr, UPLO))
    return EighResult(_out(w, arr.dtype), _out(v, arr.dtype))


def eigvalsh(A, UPLO="L", *, out=None):
    arr = _host_in("eigvalsh", A)
    _finite_or_raise("eigvalsh", A, arr)
    return _out(np.linalg.eigvalsh(_sym_from(arr, UPLO)), arr.dtype)


def qr(A, mode="reduced", *, out=None):
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"torch.linalg.qr: mode must be 'reduced', 'complete' or 'r' "
                         f"(got {mode!r})")
    arr = _host_in("qr", A, square=False)
    if mode == "r":   # torch returns an empty Q, so `Q, R = qr(A, mode='r')` unpacks
        r = np.linalg.qr(arr, mode="r")
        return QRResult(_out(np.zeros((0,)), arr.dtype), _out(r, arr.dtype))
    q, r = np.linalg.qr(arr, mode=mode)
    return QRResult(_out(q, arr.dtype), _out(r, arr.dtype))


def svd(A, full_matrices=True, *, driver=None, out=None):
    arr = _host_in("svd", A, square=False)
    _finite_or_raise("svd", A, arr)
    u, s, vh = np.linalg.svd(arr, full_matrices=full_matrices)
    return SVDResult(_out(u, arr.dtype), _out(s, arr.dtype), _out(vh, arr.dtype))


def svdvals(A, *, driver=None, out=None):
    arr = _host_in("svdvals", A, square=False)
    _finite_or_raise("svdvals", A, arr)
    return _out(np.linalg.svd(arr, compute_uv=False), arr.dtype)


# ------------------------------------------------------------ norms
def _float_or_raise(fn_name, x):
    if _dtname(x) not in ("float16", "bfloat16", "float32", "float64"):
        raise TypeError(f"torch.linalg.{fn_name}: expected a floating point tensor (got "
                        f"{_desc(x)})")


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    if out is not None:
        raise NotImplementedError("torch.linalg.vector_norm(out=...) is not supported")
    if isinstance(ord, bool) or not isinstance(ord, numbers.Real):
        raise TypeError(f"torch.linalg.vector_norm: ord must be a number (got {ord!r}); "
                        "use torch.linalg.matrix_norm for 'fro' / 'nuc'")
    if dtype is not None:
        x = x.to(dtype)
    _float_or_raise("vector_norm", x)
    if isinstance(dim, (tuple, list)) and len(dim) == 0:
        dim = None
    if (ord < 0 or ord == _INF) and x.numel() == 0:
        dims = range(x.ndim) if dim is None else ([dim] if isinstance(dim, int) else dim)
        if x.ndim == 0 or any(x.shape[d] == 0 for d in dims) or dim is None:
            raise RuntimeError(f"torch.linalg.vector_norm: the {ord} norm of an empty set has "
                               f"no value ({_desc(x)}, dim={dim}); torch raises too")
    return _norm(x, ord, dim, keepdim)


def _two_dims(fn_name, A, dim):
    if not isinstance(dim, (tuple, list)) or len(dim) != 2:
        raise ValueError(f"torch.linalg.{fn_name}: dim must be a 2-tuple (got {dim!r})")
    d0, d1 = (int(d) % A.ndim if -A.ndim <= int(d) < A.ndim else None for d in dim)
    if A.ndim < 2 or d0 is None or d1 is None or d0 == d1:
        raise ValueError(f"torch.linalg.{fn_name}: dims {tuple(dim)} must be two different "
                         f"dims of the input ({_desc(A)})")
    return d0, d1


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):
    if out is not None:
        raise NotImplementedError("torch.linalg.matrix_norm(out=...) is not supported")
    if dtype is not None:
        A = A.to(dtype)
    _float_or_raise("matrix_norm", A)
    d0, d1 = _two_dims("matrix_norm", A, dim)
    if ord == "fro":
        return _norm(A, "fro", [d0, d1], keepdim)
    valid = ("nuc", 1, -1, 2, -2, _INF, -_INF)
    if isinstance(ord, bool) or ord not in valid:
        raise ValueError(f"torch.linalg.matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, "
                         f"inf or -inf (got {ord!r})")
    if A.shape[d0] == 0 or A.shape[d1] == 0:
        # torch: 0 for an empty matrix, but a minimum over an empty dim raises
        min_dim = {-2: None, -1: d1, -_INF: d0}.get(ord, -1)
        if min_dim is None or (min_dim >= 0 and A.shape[min_dim] == 0):
            raise RuntimeError(f"torch.linalg.matrix_norm(ord={ord}): the minimum over an empty "
                               f"dim has no value ({_desc(A)}, dim={tuple(dim)})")
        return A.abs().sum([d0, d1], keepdim=keepdim)
    if ord in (1, -1, _INF, -_INF) and not isinstance(ord, bool):
        # 1: the largest column sum |a_ij| over i; inf: the largest row sum
        s_dim, m_dim = (d0, d1) if abs(ord) == 1 else (d1, d0)
        s = A.abs().sum(s_dim, keepdim=True)
        r = s.amax(m_dim, keepdim=True) if ord > 0 else s.amin(m_dim, keepdim=True)
        return r if keepdim else r.squeeze(max(d0, d1)).squeeze(min(d0, d1))
    if ord in ("nuc", 2, -2) and not isinstance(ord, bool):
        perm = [d for d in range(A.ndim) if d not in (d0, d1)] + [d0, d1]
        arr = _host_in(f"matrix_norm(ord={ord!r})", A.permute(*perm), square=False)
        _finite_or_raise(f"matrix_norm(ord={ord!r})", A, arr)
        if arr.size == 0:   # an empty batch
            s = np.zeros(arr.shape[:-2])
        else:
            sv = np.linalg.svd(arr, compute_uv=False)
            s = sv.sum(-1) if ord == "nuc" else (sv.max(-1) if ord == 2 else sv.min(-1))
        if keepdim:
            for d in sorted((d0, d1)):
                s = np.expand_dims(s, d)
        return _out(s, arr.dtype)
    raise ValueError(f"torch.linalg.matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf "
                     f"or -inf (got {ord!r})")


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):
    """torch.linalg.norm: a vector norm over one dim (or the flattened input
    when neither ord nor dim is given), a matrix norm over two dims (or of a
    2-D input with ord given)."""
    if out is not None:
        raise NotImplementedError("torch.linalg.norm(out=...) is not supported")
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None:
        dim = tuple(dim)
        if len(dim) == 1:
            if isinstance(ord, str):
                raise ValueError(f"torch.linalg.norm: ord={ord!r} needs two dims (got "
                                 f"dim={dim})")
            return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)
        if len(dim) == 2:
            return matrix_norm(A, "fro" if ord is None else ord, dim, keepdim, dtype=dtype)
        raise ValueError(f"torch.linalg.norm: dim must have one or two entries (got {dim})")
    if ord is None:
        return vector_norm(A, 2, None, keepdim, dtype=dtype)
    if A.ndim == 1:
        if isinstance(ord, str):
            raise ValueError(f"torch.linalg.norm: ord={ord!r} needs a 2-D input (got "
                             f"{_desc(A)})")
        return vector_norm(A, ord, None, keepdim, dtype=dtype)
    if A.ndim == 2:
        return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
    raise ValueError(f"torch.linalg.norm: with ord={ord!r} and no dim the input must be 1-D or "
                     f"2-D (got {_desc(A)}); pass dim")


# ------------------------------------------------------------ products (differentiable)
def cross(input, other, *, dim=-1):
    if input.ndim != other.ndim:
        raise ValueError(f"torch.linalg.cross: inputs must have the same number of dims "
                         f"({_desc(input)} and {_desc(other)})")
    if input.shape[dim] != 3 or other.shape[dim] != 3:
        raise ValueError(f"torch.linalg.cross: dim {dim} must have size 3 in both inputs "
                         f"({_desc(input)} and {_desc(other)})")
    return _EXPORTS["cross"](input, other, dim=dim)


def vecdot(x, y, *, dim=-1):
    return (x * y).sum(dim)


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    return _EXPORTS["diagonal"](A, offset, dim1, dim2)


def matrix_power(A, n):
    """A^n by repeated squaring of matmuls (differentiable for n >= 0);
    n < 0 inverts on the host first (no gradient, as ``inv``)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"torch.linalg.matrix_power: n must be an int (got {n!r})")
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"torch.linalg.matrix_power: expected (a batch of) square matrices "
                         f"(got {_desc(A)})")
    n = int(n)
    if n == 0:
        from ._creation import eye
        one = eye(A.shape[-1], dtype=A.dtype).expand(*A.shape).clone()
        # torch's identity is connected to A (a zero gradient): clamp(0, 0)
        # is 0 with derivative 0, also where A is infinite
        return one + A.clamp(0.0, 0.0) if A.requires_grad else one
    if n < 0:
        A, n = inv(A), -n
    result, base = None, A
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


def multi_dot(tensors, *, out=None):
    if out is not None:
        raise NotImplementedError("torch.linalg.multi_dot(out=...) is not supported")
    tensors = list(tensors)
    if len(tensors) < 2:
        raise ValueError(f"torch.linalg.multi_dot: expected at least 2 tensors (got "
                         f"{len(tensors)})")
    first_vec, last_vec = tensors[0].ndim == 1, tensors[-1].ndim == 1
    for i, t in enumerate(tensors):
        want = (1, 2) if i in (0, len(tensors) - 1) else (2,)
        if t.ndim not in want:
            raise ValueError(f"torch.linalg.multi_dot: tensor {i} must be "
                             f"{' or '.join(f'{w}-D' for w in want)} (got {_desc(t)})")
    if first_vec:
        tensors[0] = tensors[0].unsqueeze(0)
    if last_vec:
        tensors[-1] = tensors[-1].unsqueeze(-1)
    r = tensors[0]
    for t in tensors[1:]:
        if r.shape[-1] != t.shape[0]:
            raise ValueError(f"torch.linalg.multi_dot: shapes {list(r.shape)} and "
                             f"{list(t.shape)} cannot be multiplied")
        r = matmul(r, t)
    if last_vec:
        r = r.squeeze(-1)
    if first_vec:
        r = r.squeeze(0)
    return r


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.linalg.{name} is not supported by dragon_core.vm.torch; "
                              "use numpy.linalg on tensor.numpy()")
