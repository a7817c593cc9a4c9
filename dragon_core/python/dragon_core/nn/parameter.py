"""``Parameter``: a tensor that a :class:`~dragon_core.nn.Module` owns and
trains."""

from __future__ import annotations

from .._tensor import Tensor, tensor as _tensor


class Parameter(Tensor):
    """A leaf tensor registered by a module as trainable state.

    Assigning a ``Parameter`` to a module attribute registers it (it appears
    in ``parameters()``, ``named_parameters()`` and ``state_dict()``). It
    shares storage with the tensor it was made from and has
    ``requires_grad=True`` unless told otherwise.

    Parameters
    ----------
    data : Tensor or array_like
        The initial value (a tensor is shared, not copied).
    requires_grad : bool, default True
        Whether optimisers and autograd treat it as trainable.
    """

    def __init__(self, data=None, requires_grad: bool = True):
        if data is None:
            data = _tensor([], dtype="float32")
        elif not isinstance(data, Tensor):
            data = _tensor(data)
        super().__init__(data)
        self.requires_grad = requires_grad

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __reduce__(self):
        raise TypeError("Parameter objects are not picklable; use dragon_core.save "
                        "on a state_dict instead")
