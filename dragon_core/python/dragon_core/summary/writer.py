"""``SummaryWriter``: TensorBoard event files from a Dragon training loop.

The protos (Event, Summary, GraphDef, ...) and the TFRecord framing with
masked CRC32C come from tensorboardX (``tensorboardX.proto``,
``tensorboardX.RecordWriter``). The event file itself is managed here, with
synchronous writes: tensorboardX's ``FileWriter`` hands events to a
background thread through a queue and its ``flush()`` does not wait for
that queue, so an event added just before ``flush()`` may not be on disk.
Here ``flush()`` means written and fsync'ed.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
import types
import weakref
from datetime import datetime
from collections.abc import Mapping
from typing import Any

from . import _encode
from ._graph import to_tensorboard


def _tensorboardx():
    """tensorboardX's RecordWriter and proto modules (imported on first use)."""
    try:
        import tensorboardX
        from tensorboardX.proto import (attr_value_pb2, event_pb2, graph_pb2, node_def_pb2,
                                        summary_pb2, tensor_shape_pb2, types_pb2)
    except ImportError as e:
        raise ImportError("dragon_core.summary.SummaryWriter needs tensorboardX: "
                          "pip install tensorboardX") from e
    return types.SimpleNamespace(
        RecordWriter=tensorboardX.RecordWriter, attr_value_pb2=attr_value_pb2,
        event_pb2=event_pb2, graph_pb2=graph_pb2, node_def_pb2=node_def_pb2,
        summary_pb2=summary_pb2, tensor_shape_pb2=tensor_shape_pb2, types_pb2=types_pb2)


_file_ids = itertools.count()


class _EventFile:
    """One TensorBoard event file, written synchronously.

    The name, ``events.out.tfevents.<time>.<host>.<pid>.<n><suffix>``, is
    unique per writer, so two writers never clobber each other's file.
    Data reach the disk (flush + fsync) every ``max_queue`` events, when
    ``flush_secs`` have passed since the last flush, and on ``flush()``.
    """

    def __init__(self, pb, logdir: str, max_queue: int, flush_secs: float, suffix: str):
        os.makedirs(logdir, exist_ok=True)
        name = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
                f"{os.getpid()}.{next(_file_ids)}{suffix}")
        self.path = os.path.join(logdir, name)
        self._pb = pb
        self._lock = threading.Lock()
        self._max_queue = max(1, int(max_queue))
        self._flush_secs = float(flush_secs)
        self._records = pb.RecordWriter(self.path)
        self._pending = 0
        self._last_flush = time.monotonic()
        self.write(pb.event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))
        self.flush()

    def write(self, event) -> None:
        with self._lock:
            self._records.write(event.SerializeToString())
            self._pending += 1
            if (self._pending >= self._max_queue
                    or time.monotonic() - self._last_flush >= self._flush_secs):
                self._flush_locked()

    def _flush_locked(self) -> None:
        if self._pending:
            self._records.flush()
            self._pending = 0
        self._last_flush = time.monotonic()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def close(self) -> None:
        with self._lock:
            self._flush_locked()
            self._records.close()


def _close_files(main: _EventFile, sub: dict) -> None:
    for f in [main, *sub.values()]:
        f.close()


def _default_logdir() -> str:
    stamp = datetime.now().strftime("%b%d_%H-%M-%S")
    return os.path.join("runs", f"{stamp}_{socket.gethostname()}")


class SummaryWriter:
    """Write scalars, histograms, images and graphs for TensorBoard.

    Parameters
    ----------
    logdir : str or os.PathLike, optional
        Folder of the run (created if missing); default
        ``runs/<date>_<time>_<hostname>``. Point TensorBoard at its parent:
        ``tensorboard --logdir runs``.
    max_queue : int, optional
        Events written between two flushes to disk (at most).
    flush_secs : float, optional
        Seconds after which the next event also flushes to disk.
    filename_suffix : str, optional
        Appended to the event file name.

    Notes
    -----
    Values may be Dragon tensors (on any device), NumPy arrays or Python
    numbers. A writer is a context manager; ``close()`` flushes and closes
    every file it opened, and any ``add_*`` call after it raises
    ``RuntimeError``.

    Examples
    --------
    >>> with SummaryWriter("runs/exp1") as w:
    ...     for step in range(100):
    ...         w.add_scalar("loss", loss, step)
    """

    def __init__(self, logdir: str | os.PathLike | None = None, *, max_queue: int = 10,
                 flush_secs: float = 120, filename_suffix: str = ""):
        self._pb = _tensorboardx()
        self.logdir = os.fspath(logdir) if logdir is not None else _default_logdir()
        self._options = (max_queue, flush_secs, filename_suffix)
        self._writer = _EventFile(self._pb, self.logdir, *self._options)
        self._sub: dict[str, Any] = {}   # add_scalars: one run folder per tag
        self._closed = False
        # Close the files when the writer is collected or at interpreter exit.
        self._finalizer = weakref.finalize(self, _close_files, self._writer, self._sub)

    # ---------------------------------------------------------------- helpers

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"SummaryWriter('{self.logdir}') is closed")

    def _add(self, value, step: int | None, walltime: float | None, writer=None) -> None:
        self._check_open()
        event = self._pb.event_pb2.Event(
            wall_time=time.time() if walltime is None else float(walltime),
            summary=self._pb.summary_pb2.Summary(value=[value]))
        if step is not None:
            event.step = int(step)
        (writer or self._writer).write(event)

    # ---------------------------------------------------------------- API

    def add_scalar(self, tag: str, value: Any, step: int | None = None,
                   walltime: float | None = None) -> None:
        """Record one number.

        Parameters
        ----------
        tag : str
            Series name (``"train/loss"``; the part before ``/`` groups charts).
        value : float, int, NumPy scalar or one-element Tensor/array
        step : int, optional
            Global step (the x axis).
        walltime : float, optional
            Seconds since the epoch (default: now).

        Raises
        ------
        ValueError
            If ``value`` has more than one element.
        """
        v = _encode.scalar_value(tag, value)
        self._add(self._pb.summary_pb2.Summary.Value(tag=tag, simple_value=v), step, walltime)

    def add_scalars(self, main_tag: str, tag_scalar_dict: Mapping[str, Any],
                    step: int | None = None, walltime: float | None = None) -> None:
        """Record several numbers drawn on one chart.

        Each key of ``tag_scalar_dict`` is written to its own run folder,
        ``<logdir>/<main_tag>_<key>`` (``/`` replaced by ``_``), under the tag
        ``main_tag``: TensorBoard overlays runs that share a tag.

        Parameters
        ----------
        main_tag : str
        tag_scalar_dict : mapping of str to number or one-element tensor
        step : int, optional
        walltime : float, optional
        """
        self._check_open()
        walltime = time.time() if walltime is None else walltime
        for key, value in tag_scalar_dict.items():
            v = _encode.scalar_value(f"{main_tag}/{key}", value)
            folder = os.path.join(self.logdir, f"{main_tag}_{key}".replace("/", "_"))
            writer = self._sub.get(folder)
            if writer is None:
                writer = self._sub[folder] = _EventFile(self._pb, folder, *self._options)
            self._add(self._pb.summary_pb2.Summary.Value(tag=main_tag, simple_value=v),
                      step, walltime, writer)

    def add_histogram(self, tag: str, values: Any, step: int | None = None,
                      bins: _encode.Bins = 64, walltime: float | None = None) -> None:
        """Record the distribution of ``values``.

        Parameters
        ----------
        tag : str
        values : Tensor, ndarray or sequence of numbers
            Flattened; must be non-empty and finite.
        step : int, optional
        bins : int, str or sequence of float, optional
            As ``numpy.histogram``: a bin count, a NumPy rule (``"auto"``,
            ``"fd"``, ...) or the bin edges.
        walltime : float, optional

        Raises
        ------
        ValueError
            If ``values`` is empty or holds NaN/infinity.
        """
        histo = _encode.histogram(tag, values, bins, self._pb.summary_pb2)
        self._add(self._pb.summary_pb2.Summary.Value(tag=tag, histo=histo), step, walltime)

    def add_image(self, tag: str, img: Any, step: int | None = None,
                  walltime: float | None = None, dataformats: str = "CHW") -> None:
        """Record an image (stored as PNG).

        Parameters
        ----------
        tag : str
        img : Tensor or ndarray
            Floats in [0, 1] or integers in [0, 255] (clipped); 1, 2, 3 or 4
            channels (grey, grey+alpha, RGB, RGBA).
        step : int, optional
        walltime : float, optional
        dataformats : {"CHW", "HWC", "HW"}, optional
            Axis order of ``img``.

        Raises
        ------
        ValueError
            If the shape does not match ``dataformats`` or the channel count
            is not 1 to 4.
        """
        hwc = _encode.image_hwc(tag, img, dataformats)
        h, w, c = hwc.shape
        image = self._pb.summary_pb2.Summary.Image(
            height=h, width=w, colorspace=c, encoded_image_string=_encode.encode_png(hwc))
        self._add(self._pb.summary_pb2.Summary.Value(tag=tag, image=image), step, walltime)

    def add_graph(self, graph: Any, *example_args: Any, walltime: float | None = None,
                  **example_kwargs: Any) -> None:
        """Record a graph for TensorBoard's graph dashboard.

        Parameters
        ----------
        graph : dragon_core.proto.GraphDef, dragon_core.Function or LoadedGraph
            A GraphDef; a ``@dragon_core.function`` together with example
            arguments (its optimised graph for those arguments, as
            ``Function.get_graph``); or a graph loaded with ``load_graph``.
        *example_args, **example_kwargs
            Example arguments of a ``Function``.
        walltime : float, optional
        """
        self._check_open()
        from .. import proto as P
        from .._graph import Function
        if isinstance(graph, Function):
            graph = graph.get_graph(*example_args, **example_kwargs)
        elif example_args or example_kwargs:
            raise TypeError("add_graph: example arguments are only used with a "
                            "dragon_core.function")
        elif isinstance(getattr(graph, "graph", None), P.GraphDef):
            graph = graph.graph
        if not isinstance(graph, P.GraphDef):
            raise TypeError(f"add_graph expects a dragon_core GraphDef, a dragon_core.function "
                            f"or a loaded graph, got {type(graph).__name__}")
        tb_graph = to_tensorboard(graph, self._pb)
        self._writer.write(self._pb.event_pb2.Event(
            wall_time=time.time() if walltime is None else float(walltime),
            graph_def=tb_graph.SerializeToString()))

    def flush(self) -> None:
        """Write every pending event to disk (flush and fsync)."""
        if self._closed:
            return
        self._writer.flush()
        for w in self._sub.values():
            w.flush()

    def close(self) -> None:
        """Flush and close the event files (a second call does nothing)."""
        if self._closed:
            return
        self._closed = True
        self._finalizer()

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"SummaryWriter(logdir='{self.logdir}', {state})"
