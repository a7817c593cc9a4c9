"""``SyncBatchNorm``: batch normalisation whose statistics cover the whole
distributed batch (every rank's part), not just this rank's.

With it, a model trained by :class:`DistributedDataParallel` on ``R`` ranks
of ``B`` examples each computes the same forward and the same gradients as
one process on the ``R * B`` examples. Mean and variance are two sum
all-reduces (mean first, then the centred squares, as the single-process
kernel does), and they are differentiable: backward all-reduces the
gradients that flow into the global sums, so every rank's input gradient
includes the other ranks' terms.
"""

from __future__ import annotations

import numpy as np

from .. import ops
from ..nn.module import Module
from ..nn.normalization import _BatchNorm
from .ddp import resolve_group, untraced

_GROUPS: dict = {}      # attr value -> _Group, for the all-reduce op's kernel
_OP = None


def _all_reduce_op():
    """The differentiable sum all-reduce ``SyncBNAllReduce(x, group=k)``,
    defined on first use (a Python CPU kernel calling the group's
    collective; its gradient is the same all-reduce of the output gradient)."""
    global _OP
    if _OP is not None:
        return _OP
    from .. import custom_op, from_numpy

    @custom_op("SyncBNAllReduce", attrs={"group": 0}, dtypes=("float32", "float64"),
               plugin="distributed")
    def sync_bn_all_reduce(x, group):
        """Sum of ``x`` over the ranks of process group ``group`` (SyncBatchNorm)."""
        g = _GROUPS.get(int(group))
        if g is None:
            raise RuntimeError(f"SyncBNAllReduce: no process group {group}")
        with untraced():
            return np.array(g.all_reduce(from_numpy(np.array(x, copy=True))).numpy(), copy=True)

    @custom_op.gradient(sync_bn_all_reduce._dragon_op)
    def _grad(node, dy):
        return [_OP(dy, group=node.attrs["group"])]

    _OP = sync_bn_all_reduce
    return _OP


def _global_sum(x, group_key: int, size: int):
    return x if size == 1 else _all_reduce_op()(x, group=group_key)


class SyncBatchNorm(_BatchNorm):
    """Batch normalisation of ``[N, C, *]`` input over every rank's batch.

    Parameters are those of :class:`dragon_core.nn.BatchNorm2d`, plus
    ``process_group`` (default: ``dragon_core.distributed``'s default group;
    resolved at the first training forward). In eval mode (running
    statistics) it is a plain batch norm and communicates nothing. Every
    rank must call it the same number of times (it issues collectives).
    """

    _ranks = (2, 3, 4, 5)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 process_group=None, device=None, dtype="float32"):
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         device=device, dtype=dtype)
        object.__setattr__(self, "_pg", process_group)
        object.__setattr__(self, "_group_key", None)

    def _group(self):
        if self._group_key is None:
            g = resolve_group(self._pg)
            key = len(_GROUPS) + 1
            _GROUPS[key] = g
            object.__setattr__(self, "_group_key", key)
        return _GROUPS[self._group_key]

    def _total_count(self, g, local_n: int) -> int:
        """Examples per channel over all ranks: a host all-reduce of this
        rank's count (a Python int even while tracing, where it is fixed in
        the graph like the shapes it comes from)."""
        if g.size == 1:
            return local_n
        from .. import from_numpy
        with untraced():
            count = g.all_reduce(from_numpy(np.array([local_n], dtype=np.float64)))
            return int(round(float(count.numpy()[0])))

    def forward(self, x):
        if not (self.training or not self.track_running_stats):
            return super().forward(x)
        name = type(self).__name__
        if x.ndim not in self._ranks:
            raise ValueError(f"{name}: expected input of rank 2 to 5 [N, C, *], got shape "
                             f"{tuple(x.shape)}")
        c = self.num_features
        if x.shape[1] != c:
            raise ValueError(f"{name}: input has {x.shape[1]} channels (shape "
                             f"{tuple(x.shape)}), the layer {c}")
        g = self._group()
        axes = [0] + list(range(2, x.ndim))
        local_n = x.size // c
        n = self._total_count(g, local_n)
        if n <= 1:
            raise ValueError(f"{name}: training needs more than one value per channel over "
                             f"all ranks, got {n} (local input shape {tuple(x.shape)})")
        bshape = [1, c] + [1] * (x.ndim - 2)
        mean = _global_sum(ops.sum(x, axes), self._group_key, g.size) * (1.0 / n)
        centred = x - mean.reshape(bshape)
        var = _global_sum(ops.sum(centred * centred, axes), self._group_key, g.size) * (1.0 / n)
        y = centred * ops.rsqrt(var + self.eps).reshape(bshape)
        if self.affine:
            y = y * self.weight.reshape(bshape) + self.bias.reshape(bshape)
        if self.training and self.track_running_stats:
            from .._autograd import no_grad
            with no_grad():
                m = float(self.momentum)
                self.running_mean.assign(self.running_mean * (1.0 - m) + mean.detach() * m)
                self.running_var.assign(self.running_var * (1.0 - m)
                                        + var.detach() * (m * n / (n - 1)))
        return y

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, process_group=None) -> Module:
        """``module`` with every BatchNorm1d/2d replaced by a SyncBatchNorm
        carrying the same parameters, buffers and hyper-parameters (in place
        for children; returns the new module when ``module`` itself is one)."""
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            new = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats, process_group=process_group,
                      dtype=str(module.running_mean.dtype if module.running_mean is not None
                                else module.weight.dtype))
            if module.affine:
                new.weight, new.bias = module.weight, module.bias
            if module.track_running_stats:
                new.running_mean, new.running_var = module.running_mean, module.running_var
            new.train(module.training)
            return new
        for name, child in list(module.named_children()):
            setattr(module, name, cls.convert_sync_batchnorm(child, process_group))
        return module
