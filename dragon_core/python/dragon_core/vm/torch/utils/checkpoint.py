"""``torch.utils.checkpoint``: the values and gradients of PyTorch's
activation checkpointing, without its memory saving.

``checkpoint(fn, *args)`` runs ``fn`` once and keeps its graph, as a plain
call would: the results and gradients are the ones torch's checkpoint gives
(torch recomputes the forward in the backward pass, with the RNG state
restored, precisely so that they equal a plain call's). Memory is not
saved. The reentrant variant's rules that change results are kept: with no
tensor input requiring grad it computes under ``no_grad`` (torch warns
"Gradients will be None"), and it refuses keyword arguments.
"""

from __future__ import annotations

import contextlib
import warnings

from .._tensor import Tensor
from ..autograd import no_grad
from dragon_core import _C


def checkpoint(function, *args, use_reentrant=None, context_fn=None,
               determinism_check="default", debug=False, preserve_rng_state=True, **kwargs):
    """``function(*args, **kwargs)`` (see the module docstring)."""
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint: the use_reentrant parameter should be passed "
                      "explicitly; use_reentrant=False is recommended", UserWarning,
                      stacklevel=2)
        use_reentrant = True
    if use_reentrant:
        if context_fn is not None:
            raise ValueError("Passing `context_fn` is only supported when "
                             "use_reentrant=False.")
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        if _C._is_grad_enabled() and not any(isinstance(a, Tensor) and a.requires_grad
                                             for a in args):
            warnings.warn("None of the inputs have requires_grad=True. Gradients will be None",
                          UserWarning, stacklevel=2)
            with no_grad():
                return function(*args)
        return function(*args)
    ctx = contextlib.nullcontext()
    if context_fn is not None:
        ctx, _ = context_fn()
    with ctx:
        return function(*args, **kwargs)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Run ``functions`` (a list or an ``nn.Sequential``) one after the other
    on ``input``, as :func:`checkpoint` would per segment."""
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint.checkpoint_sequential: the use_reentrant "
                      "parameter should be passed explicitly", UserWarning, stacklevel=2)
        use_reentrant = True
    fns = list(functions.children()) if hasattr(functions, "children") else list(functions)
    if int(segments) < 1:
        raise ValueError(f"checkpoint_sequential: segments must be >= 1, got {segments}")

    segments = int(segments)

    def run_range(start, end):
        def run(x):
            for f in fns[start:end]:
                x = f(x)
            return x
        return run
    # As torch: the first ``segments - 1`` segments run checkpointed, the
    # last one runs plainly (so its parameters train even when ``input``
    # does not require grad).
    size = len(fns) // segments
    end = 0
    for start in range(0, size * (segments - 1), size):
        end = start + size
        input = checkpoint(run_range(start, end), input, use_reentrant=use_reentrant, **kwargs)
    return run_range(end, len(fns))(input)
