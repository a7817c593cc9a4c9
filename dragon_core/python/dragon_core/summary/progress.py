"""``progress(iterable)``: a tqdm progress bar that stays quiet in logs."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO


def progress(iterable: Iterable, desc: str | None = None, *, total: int | None = None,
             force: bool = False, disable: bool | None = None,
             file: TextIO | None = None, **tqdm_kwargs: Any):
    """Wrap ``iterable`` in a tqdm progress bar.

    The bar is drawn only when ``file`` is a terminal, so training logs
    redirected to a file or collected by CI stay free of carriage returns;
    iteration itself is never affected.

    Parameters
    ----------
    iterable : iterable
        What to iterate over.
    desc : str, optional
        Label shown before the bar.
    total : int, optional
        Number of items (default: ``len(iterable)`` when it has one).
    force : bool, optional
        Draw the bar even when ``file`` is not a terminal.
    disable : bool, optional
        ``True`` never draws the bar (wins over ``force``); ``None`` (default)
        decides from ``force`` and whether ``file`` is a terminal.
    file : file-like, optional
        Where the bar goes (default ``sys.stderr``).
    **tqdm_kwargs
        Passed to ``tqdm.tqdm`` (``unit``, ``leave``, ``position``, ...).

    Returns
    -------
    tqdm.tqdm
        Iterable like ``iterable``; also has ``set_postfix``, ``update``, ...

    Raises
    ------
    ImportError
        If tqdm is not installed (``pip install tqdm``).
    """
    try:
        from tqdm import tqdm
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("dragon_core.summary.progress needs tqdm: pip install tqdm") from e
    stream = sys.stderr if file is None else file
    if disable is None:
        isatty = getattr(stream, "isatty", None)
        disable = not (force or (isatty is not None and isatty()))
    return tqdm(iterable, desc=desc, total=total, disable=disable, file=stream,
                **tqdm_kwargs)
