"""``torch.nn.init`` over ``dragon_core.nn.init`` (the initialisers write
the dragon tensor under the handle, so modules and optimizers see them)."""

from __future__ import annotations

import math

from dragon_core.nn import init as _I

calculate_gain = _I.calculate_gain


def _fan(t):
    shape = t.shape
    if len(shape) < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 "
                         "dimensions")
    rf = math.prod(shape[2:]) if len(shape) > 2 else 1
    return shape[1] * rf, shape[0] * rf


def _call(name):
    fn = getattr(_I, name)

    def init(tensor, *args, **kwargs):
        kwargs.pop("generator", None)
        if tensor._t._storage_refs > 1:
            # A view (or a tensor whose memory another one shares): the
            # dragon initialiser rebinds the handle to new memory, which
            # would leave the base unchanged; fill a copy and write it
            # through, in place, as torch does.
            from ..autograd import no_grad
            fresh = tensor.detach().clone()
            fn(fresh._t, *args, **kwargs)
            with no_grad():
                tensor.copy_(fresh)
            return tensor
        fn(tensor._t, *args, **kwargs)
        return tensor
    init.__name__ = name
    return init


uniform_ = _call("uniform_")
normal_ = _call("normal_")
constant_ = _call("constant_")
zeros_ = _call("zeros_")
ones_ = _call("ones_")
eye_ = _call("eye_")
xavier_uniform_ = _call("xavier_uniform_")
xavier_normal_ = _call("xavier_normal_")


def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    fan_in, fan_out = _fan(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    gain = calculate_gain(nonlinearity, a)
    bound = math.sqrt(3.0) * gain / math.sqrt(fan)
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    fan_in, fan_out = _fan(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return normal_(tensor, 0.0, std)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    import numpy as np
    from .._creation import _np_rng
    n = tensor.numel()
    out = np.empty(0)
    while out.size < n:
        s = _np_rng().normal(mean, std, n * 2)
        out = np.concatenate([out, s[(s >= a) & (s <= b)]])
    from .._creation import tensor as _tensor
    tensor.data.copy_(_tensor(out[:n].reshape(tuple(tensor.shape)), dtype=tensor.dtype))
    return tensor


def orthogonal_(tensor, gain=1.0, generator=None):
    import numpy as np
    from .._creation import _np_rng, tensor as _tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = _np_rng().normal(size=(rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    tensor.data.copy_(_tensor(gain * q.reshape(tuple(tensor.shape)), dtype=tensor.dtype))
    return tensor


def _calculate_fan_in_and_fan_out(tensor):
    return _fan(tensor)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.nn.init.{name} is not supported; use one of uniform_, "
                              "normal_, constant_, xavier_*, kaiming_*, orthogonal_")
