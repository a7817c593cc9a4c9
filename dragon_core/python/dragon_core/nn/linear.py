"""Linear, Identity, Flatten and Embedding layers."""

from __future__ import annotations

from .. import ops
from . import functional as F
from . import init
from ._common import add_weight_and_bias, check_positive, empty_param, reset_weight_and_bias
from .module import Module


class Identity(Module):
    """Returns its input unchanged (a placeholder layer)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Linear(Module):
    """``y = x @ weight.T + bias`` with ``weight`` of shape ``[out, in]``.

    Initialised as PyTorch does: ``weight`` and ``bias`` from
    ``U(-1/sqrt(in), 1/sqrt(in))``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device=None, dtype="float32"):
        super().__init__()
        check_positive("Linear", in_features=in_features, out_features=out_features)
        self.in_features, self.out_features = in_features, out_features
        add_weight_and_bias(self, [out_features, in_features], out_features, bias, dtype,
                            device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_weight_and_bias(self.weight, self.bias)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Flatten(Module):
    """Flattens dimensions ``start_dim..end_dim`` into one (default: all but batch)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return ops.flatten(x, start_axis=self.start_dim, end_axis=self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Embedding(Module):
    """A lookup table of ``num_embeddings`` vectors of size ``embedding_dim``.

    ``padding_idx``'s row starts at zero and receives no gradient.
    Initialised from ``N(0, 1)``.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 device=None, dtype="float32"):
        super().__init__()
        check_positive("Embedding", num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} is out of range for "
                                 f"{num_embeddings} embeddings")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        self.weight = empty_param([num_embeddings, embedding_dim], dtype, device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            from .._autograd import no_grad
            w = self.weight.cpu().numpy().copy()
            w[self.padding_idx] = 0
            with no_grad():
                from .._tensor import tensor
                self.weight.assign(tensor(w).to(str(self.weight.device)))

    def forward(self, indices):
        return F.embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")
