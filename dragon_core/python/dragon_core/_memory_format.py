"""Memory formats: how a tensor's elements are laid out, PyTorch's way.

A tensor's *logical* shape never changes with its memory format: a
channels-last image batch is still ``[N, C, H, W]``, only its strides are
those of the dense ``[N, H, W, C]`` layout (channel innermost). Every op
computes the same values whatever the format; kernels that read the format
natively (the ``DG_KERNEL_CHANNELS_LAST`` trait, e.g. cuDNN convolutions)
skip the NCHW <-> NHWC copies a contiguous tensor would need there, and
element-wise ops keep a shared channels-last format (docs/devices.md,
"Memory format").
"""

from __future__ import annotations


class memory_format:  # noqa: N801 (PyTorch's spelling)
    """A memory format: :data:`contiguous_format`, :data:`channels_last`,
    :data:`channels_last_3d` or :data:`preserve_format`.

    Attributes
    ----------
    name : str
        ``"contiguous_format"``, ``"channels_last"``, ``"channels_last_3d"``
        or ``"preserve_format"``.
    rank : int or None
        The rank a tensor must have for this format (4 or 5), None for any.
    """

    __slots__ = ("name", "rank")

    def __init__(self, name: str, rank):
        self.name = name
        self.rank = rank

    def __repr__(self) -> str:
        return f"dragon_core.{self.name}"

    def __reduce__(self):
        return self.name


#: Row-major dense strides (the default).
contiguous_format = memory_format("contiguous_format", None)
#: A 4-D ``[N, C, H, W]`` tensor with the strides of dense ``[N, H, W, C]``.
channels_last = memory_format("channels_last", 4)
#: A 5-D ``[N, C, D, H, W]`` tensor with the strides of dense ``[N, D, H, W, C]``.
channels_last_3d = memory_format("channels_last_3d", 5)
#: Keep the input's format (``clone``, ``to``): channels-last stays so.
preserve_format = memory_format("preserve_format", None)

_BY_NAME = {f.name: f for f in (contiguous_format, channels_last, channels_last_3d,
                                preserve_format)}
_BY_NAME["contiguous"] = contiguous_format

_TO_LAST = {4: (0, 2, 3, 1), 5: (0, 2, 3, 4, 1)}
_TO_FIRST = {4: (0, 3, 1, 2), 5: (0, 4, 1, 2, 3)}


def as_memory_format(value, where: str) -> memory_format:
    """``value`` as a :class:`memory_format` (one of them, or its name).

    Raises
    ------
    TypeError
        ``value`` names no memory format.
    """
    if isinstance(value, memory_format):
        return value
    name = getattr(value, "name", value) if not isinstance(value, str) else value
    if isinstance(name, str):
        # torch.channels_last given to dragon_core (repr "torch.channels_last").
        fmt = _BY_NAME.get(name.rsplit(".", 1)[-1])
        if fmt is not None:
            return fmt
    raise TypeError(f"{where}: memory_format must be one of dragon_core.contiguous_format, "
                    f"channels_last, channels_last_3d, preserve_format; got {value!r}")


def _check_rank(x, fmt: memory_format, where: str):
    if fmt.rank is not None and x.ndim != fmt.rank:
        raise ValueError(f"{where}: {fmt.name} needs a rank-{fmt.rank} tensor "
                         f"({'[N, C, H, W]' if fmt.rank == 4 else '[N, C, D, H, W]'}), got "
                         f"shape {list(x.shape)} (rank {x.ndim}) of {x.dtype} on {x.device}")


def is_channels_last(x) -> bool:
    """Whether ``x`` (rank 4 or 5) has the strides of the dense channels-last
    layout (size-1 axes ignored, as for contiguity)."""
    return bool(x._is_channels_last())


def suggest_memory_format(x) -> memory_format:
    """The format an op's result takes from ``x``: channels-last when ``x``
    is channels-last and not also contiguous (PyTorch's rule), else
    contiguous."""
    if x.ndim in (4, 5) and not x.is_contiguous() and is_channels_last(x):
        return channels_last if x.ndim == 4 else channels_last_3d
    return contiguous_format


def is_contiguous(x, fmt=contiguous_format) -> bool:
    """``x.is_contiguous(memory_format=fmt)``."""
    fmt = as_memory_format(fmt, "is_contiguous")
    if fmt is preserve_format:
        raise ValueError("is_contiguous: preserve_format is not a layout to test for; use "
                         "contiguous_format, channels_last or channels_last_3d")
    if fmt is contiguous_format:
        return bool(x._is_contiguous_strides())
    return x.ndim == fmt.rank and is_channels_last(x)


def contiguous(x, fmt=contiguous_format):
    """``x.contiguous(memory_format=fmt)``: ``x`` itself when it already has
    that layout, else a dense copy in it (same logical shape and values;
    differentiable).

    Raises
    ------
    ValueError
        A channels-last format for a tensor whose rank is not 4 (5 for
        ``channels_last_3d``), as PyTorch does.
    """
    from . import ops
    fmt = as_memory_format(fmt, "contiguous")
    if fmt is preserve_format:
        fmt = suggest_memory_format(x)
    _check_rank(x, fmt, "contiguous")
    if fmt is contiguous_format:
        return x if x._is_contiguous_strides() else ops.contiguous(x)
    if is_channels_last(x):
        return x
    # Dense in [N, H, W, C] order, then viewed back as [N, C, H, W]: both
    # transposes are views, the copy is the Contiguous between them.
    dense = ops.contiguous(ops.transpose(x, _TO_LAST[x.ndim]))
    return ops.transpose(dense, _TO_FIRST[x.ndim])
