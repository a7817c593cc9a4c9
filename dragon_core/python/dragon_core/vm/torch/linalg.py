"""``torch.linalg``: norms (differentiable, composed of ops) and host
solvers (``inv``, ``det``, ``solve``, ``svd``, ...) that refuse tensors
recorded by autograd rather than return gradient-less results."""

from __future__ import annotations

import numpy as np

from ._creation import _from_numpy_owned
from ._functions import _EXPORTS
from ._tensor import _records

norm = _EXPORTS["norm"]
vector_norm = _EXPORTS["norm"]
matmul = _EXPORTS["matmul"]


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False):
    if ord != "fro":
        raise NotImplementedError(f"matrix_norm(ord={ord!r}) is not supported; use 'fro'")
    return norm(A, "fro", list(dim), keepdim)


def _host(fn_name, fn):
    def run(*args, **kwargs):
        for a in args:
            if hasattr(a, "_t") and _records(a._t):
                raise NotImplementedError(
                    f"torch.linalg.{fn_name} has no gradient in dragon_core.vm.torch yet; call "
                    "it under torch.no_grad() or on .detach()")
        res = fn(*[a._t.numpy() if hasattr(a, "_t") else a for a in args], **kwargs)
        if isinstance(res, tuple):
            return tuple(_from_numpy_owned(np.asarray(r)) for r in res)
        return _from_numpy_owned(np.asarray(res))
    run.__name__ = fn_name
    return run


inv = _host("inv", np.linalg.inv)
det = _host("det", np.linalg.det)
solve = _host("solve", np.linalg.solve)
pinv = _host("pinv", np.linalg.pinv)
eigh = _host("eigh", np.linalg.eigh)
eigvalsh = _host("eigvalsh", np.linalg.eigvalsh)
cholesky = _host("cholesky", np.linalg.cholesky)
qr = _host("qr", np.linalg.qr)
matrix_rank = _host("matrix_rank", np.linalg.matrix_rank)
svd = _host("svd", lambda a, full_matrices=True: np.linalg.svd(a, full_matrices=full_matrices))
svdvals = _host("svdvals", lambda a: np.linalg.svd(a, compute_uv=False))
slogdet = _host("slogdet", np.linalg.slogdet)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.linalg.{name} is not supported by dragon_core.vm.torch; "
                              "use numpy.linalg on tensor.numpy()")
