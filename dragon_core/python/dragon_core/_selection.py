"""Ops whose result is not a single schema op: the data-dependent ``nonzero``
and ``unique`` (slices of the padded ``NonZero`` / ``Unique`` ops) and
``einsum`` (lowered to transpose, reshape, sum and matmul).

They are re-exported by :mod:`dragon_core.ops`.
"""

from __future__ import annotations

import string

import numpy as np


def _ops():
    from . import ops
    return ops


def _as_tensor(x):
    from ._tensor import Tensor, tensor
    return x if isinstance(x, Tensor) else tensor(x)


def _count(count, op: str, padded: str) -> int:
    """The host value of a padded op's 0-d count. A trace would bake the
    value of the traced call into the graph, so it refuses instead."""
    from . import _C
    if _C._is_tracing():
        from .errors import InvalidArgumentError
        raise InvalidArgumentError(
            f"{op}: the output shape depends on the input values, which a traced "
            f"function (dragon_core.function) cannot depend on; use "
            f"dragon_core.ops.{padded} (fixed-size outputs and a count) inside it", op=op)
    return int(count.item())


def nonzero(x):
    """Coordinates of the non-zero elements of ``x`` (ONNX ``NonZero``).

    Parameters
    ----------
    x : Tensor
        Any dtype; NaN counts as non-zero.

    Returns
    -------
    Tensor
        int64 ``[x.ndim, count]``: column ``j`` holds the coordinates of the
        ``j``-th non-zero element in row-major order, i.e.
        ``numpy.array(numpy.nonzero(x))``.

    Notes
    -----
    The size of the result depends on the values of ``x``, so this function
    reads the count on the host; inside ``dragon_core.function`` use
    :func:`nonzero_padded`, whose outputs have a fixed shape.
    """
    o = _ops()
    x = _as_tensor(x)
    indices, count = o.nonzero_padded(x)
    n = _count(count, "NonZero", "nonzero_padded")
    return o.slice(indices, [0, 0], [x.ndim, n], [1, 1]) if x.ndim else o.reshape(indices, [0, n])


def unique(x, return_index: bool = False, return_inverse: bool = False,
           return_counts: bool = False, sorted: bool = True, axis=None):
    """The distinct values of the flattened ``x``, or its distinct slices
    along ``axis`` (``numpy.unique``; ONNX ``Unique``).

    Parameters
    ----------
    x : Tensor
        float32, float64, int32 or int64.
    return_index : bool, default False
        Also return the position of each value's first occurrence (in the
        flattened ``x``, or along ``axis``).
    return_inverse : bool, default False
        Also return the position in ``values`` of every element (with
        ``x``'s shape), or of every slice along ``axis`` (``[x.shape[axis]]``),
        so that ``values[inverse] == x`` (``take(values, inverse, axis)``).
    return_counts : bool, default False
        Also return how often each value (slice) occurs.
    sorted : bool, default True
        Values sorted ascending (slices lexicographically, in row-major
        order; NaN last); False keeps the order of first occurrence (ONNX
        ``sorted=0``).
    axis : int, optional
        Compare the slices ``x[..., k, ...]`` along this axis (negative
        counts from the end) instead of the elements of the flattened ``x``.
        A 0-d ``x`` has no axis.

    Returns
    -------
    Tensor or tuple of Tensor
        ``values`` (1-D, or ``x``'s shape with ``axis`` shortened to the
        number of distinct slices) and then, in this order, the requested
        ``index``, ``inverse`` and ``counts`` (int64).

    Raises
    ------
    InvalidArgumentError
        For a dtype other than the four above, an ``axis`` out of range, an
        ``axis`` with a 0-d ``x``, or inside ``dragon_core.function``.

    Notes
    -----
    NaNs compare equal, so they collapse into one value (NumPy 2 does the
    same without ``axis``; with ``axis`` NumPy keeps NaN-holding slices
    apart). Reads the number of distinct values on the host; inside
    ``dragon_core.function`` use :func:`unique_padded`, whose outputs have a
    fixed shape and a count.
    """
    o = _ops()
    x = _as_tensor(x)
    if axis is not None:
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            from .errors import InvalidArgumentError
            raise InvalidArgumentError(f"Unique: axis must be an int or None, got "
                                       f"{type(axis).__name__}", op="Unique")
        axis = int(axis)
        values, first, inverse, counts, count = o.unique_padded(x, sorted=sorted, axis=axis)
        n = _count(count, "Unique", "unique_padded")
        ax = axis + x.ndim if axis < 0 else axis
        begin, end = [0] * x.ndim, list(x.shape)
        end[ax] = n
        out = [o.slice(values, begin, end, [1] * x.ndim)]
    else:
        values, first, inverse, counts, count = o.unique_padded(x, sorted=sorted)
        n = _count(count, "Unique", "unique_padded")
        out = [o.slice(values, [0], [n], [1])]
    if return_index:
        out.append(o.slice(first, [0], [n], [1]))
    if return_inverse:
        out.append(inverse)
    if return_counts:
        out.append(o.slice(counts, [0], [n], [1]))
    return out[0] if len(out) == 1 else tuple(out)


# -- einsum ------------------------------------------------------------------

_LETTERS = set(string.ascii_letters)


def _einsum_error(equation, msg):
    from .errors import InvalidArgumentError
    return InvalidArgumentError(f"einsum('{equation}'): {msg}", op="Einsum")


def _parse(equation: str, shapes):
    """Per-operand label lists and the output labels; '...' becomes labels
    of its own (aligned from the right, so ellipsis dimensions broadcast)."""
    eq = equation.replace(" ", "")
    if eq.count("->") > 1:
        raise _einsum_error(equation, "more than one '->'")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise _einsum_error(equation, f"the equation names {len(terms)} operands, "
                            f"{len(shapes)} were given")
    ell_rank = 0
    parsed = []
    for t, shape in zip(terms, shapes):
        has_ell = "..." in t
        letters = t.replace("...", "")
        if t.count("...") > 1 or any(c not in _LETTERS for c in letters):
            raise _einsum_error(equation, f"bad term '{t}' (letters a-z, A-Z and at most "
                                "one '...')")
        n_ell = len(shape) - len(letters)
        if n_ell < 0 or (n_ell and not has_ell):
            raise _einsum_error(equation, f"term '{t}' has {len(letters)} labels but its "
                                f"operand has shape {list(shape)}")
        ell_rank = max(ell_rank, n_ell)
        parsed.append((t, n_ell))
    ell = [f"...{i}" for i in range(ell_rank)]
    labels = []
    for t, n_ell in parsed:
        pre, _, post = t.partition("...")
        if "..." not in t:
            labels.append(list(t))
        else:
            labels.append(list(pre) + ell[ell_rank - n_ell:] + list(post))
    if arrow:
        if rhs.count("...") > 1 or any(c not in _LETTERS for c in rhs.replace("...", "")):
            raise _einsum_error(equation, f"bad output term '{rhs}'")
        pre, has, post = rhs.partition("...")
        if not has and ell_rank:
            # NumPy: '...' dimensions must appear in an explicit output.
            raise _einsum_error(equation, "the output term must contain '...' when an "
                                "operand does")
        out = list(pre) + (ell if has else []) + list(post)
        if len(set(out)) != len(out):
            raise _einsum_error(equation, f"output term '{rhs}' repeats a label")
        seen = {c for ls in labels for c in ls}
        for c in out:
            if c not in seen:
                raise _einsum_error(equation, f"output label '{c}' is in no operand")
    else:
        counts = {}
        for ls in labels:
            for c in ls:
                counts[c] = counts.get(c, 0) + 1
        out = ell + sorted(c for c, k in counts.items() if k == 1 and not c.startswith("..."))
    return labels, out


def _diagonals(equation, t, ls):
    """Collapse a label repeated within one term to its diagonal (a Gather of
    the positions i * (n + 1) of the two axes flattened together)."""
    o = _ops()
    ls = list(ls)
    while len(set(ls)) != len(ls):
        c = next(c for c in ls if ls.count(c) > 1)
        p = ls.index(c)
        q = ls.index(c, p + 1)
        n = t.shape[p]
        if t.shape[q] != n:
            raise _einsum_error(equation, f"label '{c}' repeated in one term has sizes {n} "
                                f"and {t.shape[q]} (a diagonal needs equal sizes)")
        rest = [i for i in range(t.ndim) if i not in (p, q)]
        t = o.transpose(t, rest + [p, q])
        lead = [t.shape[i] for i in range(len(rest))]
        t = o.reshape(t, lead + [n * n])
        from . import tensor
        idx = tensor(np.arange(n, dtype=np.int64) * (n + 1), device=str(t.device))
        t = o.gather(t, idx, len(lead))
        ls = [ls[i] for i in rest] + [c]
    return t, ls


def einsum(equation: str, *operands):
    """Einstein summation over the operands, as ``numpy.einsum``.

    Parameters
    ----------
    equation : str
        ``"ij,jk->ik"``-style subscripts: letters label axes, ``...`` the
        broadcast leading axes; without ``->`` the output is the labels that
        occur once, sorted (after the ``...`` axes). A label repeated within
        one term takes the diagonal (``"ii->i"``; ``"ii->"`` is the trace).
    *operands : Tensor
        One tensor per term. A label must have the same size everywhere it
        appears, or size 1 (broadcast).

    Returns
    -------
    Tensor

    Notes
    -----
    Lowered to ``transpose``, ``reshape``, ``gather`` (diagonals), ``sum``,
    ``broadcast_to`` and ``matmul`` (batched), contracting left to right, so
    it differentiates, traces and exports through those ops.
    """
    o = _ops()
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str):
        raise TypeError(f"einsum: the equation must be a str, got {type(equation).__name__}")
    ts = [_as_tensor(t) for t in operands]
    if not ts:
        raise _einsum_error(equation, "no operands")
    labels, out = _parse(equation, [tuple(t.shape) for t in ts])
    for i, (t, ls) in enumerate(zip(ts, labels)):
        ts[i], labels[i] = _diagonals(equation, t, ls)
    sizes = {}
    for t, ls in zip(ts, labels):
        for c, d in zip(ls, t.shape):
            prev = sizes.get(c, d)
            if prev != d and prev != 1 and d != 1:
                shapes = ", ".join(str(list(u.shape)) for u in ts)
                name = "'...'" if c.startswith("...") else f"'{c}'"
                raise _einsum_error(equation, f"label {name} has sizes {prev} and {d} "
                                    f"(operand shapes {shapes})")
            sizes[c] = d if prev == 1 else prev

    def drop_unneeded(t, ls, needed):
        axes = [i for i, c in enumerate(ls) if c not in needed]
        if not axes:
            return t, ls
        return o.sum(t, axes, keepdims=False), [c for c in ls if c in needed]

    def arrange(t, ls, order):
        """t with its labels permuted into `order`, broadcast to full sizes."""
        perm = [ls.index(c) for c in order]
        if perm != list(range(len(perm))):
            t = o.transpose(t, perm)
        full = [sizes[c] for c in order]
        if list(t.shape) != full:
            t = o.broadcast_to(t, full)
        return t

    items = list(zip(ts, labels))
    while len(items) > 1:
        (a, la), (b, lb) = items[0], items[1]
        later = set(out).union(*[set(ls) for _, ls in items[2:]])
        a, la = drop_unneeded(a, la, later | set(lb))
        b, lb = drop_unneeded(b, lb, later | set(la))
        batch = [c for c in la if c in lb and c in later]
        contract = [c for c in la if c in lb and c not in later]
        left = [c for c in la if c not in lb]
        right = [c for c in lb if c not in la]
        size = lambda cs: int(np.prod([sizes[c] for c in cs], dtype=np.int64))  # noqa: E731
        a = o.reshape(arrange(a, la, batch + left + contract),
                      [size(batch), size(left), size(contract)])
        b = o.reshape(arrange(b, lb, batch + contract + right),
                      [size(batch), size(contract), size(right)])
        new = batch + left + right
        c = o.reshape(o.matmul(a, b), [sizes[x] for x in new])
        items = [(c, new)] + items[2:]
    t, ls = items[0]
    t, ls = drop_unneeded(t, ls, set(out))
    return arrange(t, ls, out)
