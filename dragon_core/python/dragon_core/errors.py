"""Typed exceptions raised by Dragon.

Every error raised by the core derives from :class:`DragonError` and from the
built-in exception a Python user would expect (``ValueError`` for bad
arguments, ``IndexError`` for out-of-range indices, ``MemoryError`` for
out-of-memory, ...), so ordinary ``except`` clauses keep working.
Errors raised by a kernel are also instances of :class:`KernelError` and carry
the op, kernel and plugin names.
"""

from __future__ import annotations


class DragonError(Exception):
    """Base class of Dragon's errors.

    Attributes
    ----------
    op : str
        The op involved ("" when none).
    kernel : str
        The kernel that failed ("" unless a kernel raised it).
    plugin : str
        The plugin involved ("" when none).
    code : int
        The ABI status code (``DG_INVALID_ARGUMENT`` = 1, ...).
    """

    def __init__(self, message: str = "", *, op: str = "", kernel: str = "",
                 plugin: str = "", code: int = 0):
        super().__init__(message)
        self.op = op
        self.kernel = kernel
        self.plugin = plugin
        self.code = code


class InvalidArgumentError(DragonError, ValueError):
    """Bad shapes, dtypes, attribute values, or tensors on different devices."""


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong Python type (also a ``TypeError``)."""


class NotFoundError(DragonError, LookupError):
    """Unknown op, device or attribute."""


class OutOfRangeError(DragonError, IndexError):
    """An index outside its dimension."""


class UnimplementedError(DragonError, NotImplementedError):
    """A kernel does not handle this case."""


class NoKernelError(DragonError, NotImplementedError):
    """No kernel is registered for (op, device, dtype).

    The message names the op, device and dtype, the kernels that are
    registered, and which wheel provides the missing ones.
    """


class ResourceExhaustedError(DragonError, MemoryError):
    """Out of memory."""


class InternalError(DragonError, RuntimeError):
    """A bug in Dragon or in a plugin."""


class FailedPreconditionError(DragonError, RuntimeError):
    """The system is not in a state to run this (e.g. a pin matches nothing)."""


class UnavailableError(DragonError, RuntimeError):
    """A resource (e.g. a device) is not present right now."""


class AbortedError(DragonError, RuntimeError):
    """The device or a peer gave up (a lost device, an aborted collective)."""


class DeadlineExceededError(DragonError, TimeoutError):
    """A wait (for a collective, an event) took longer than allowed."""


class PluginError(DragonError, ImportError):
    """A plugin failed to load; raised when its ops are used, with the cause."""


class CheckpointError(DragonError, ValueError):
    """A checkpoint file is truncated, corrupt, malformed or from a newer
    format version; the message names the file and what is wrong.

    Attributes
    ----------
    path : str
        The checkpoint file.
    """

    def __init__(self, message: str = "", *, path: str = "", **kwargs):
        super().__init__(message, **kwargs)
        self.path = path


class KernelError(DragonError):
    """Mixin of every error raised from inside a kernel."""


_BY_CODE = {
    1: InvalidArgumentError,
    2: NotFoundError,
    3: UnimplementedError,
    4: ResourceExhaustedError,
    5: InternalError,
    6: OutOfRangeError,
    7: FailedPreconditionError,
    8: UnavailableError,
    9: AbortedError,
    10: DeadlineExceededError,
}

# Kernel-raised variants: KernelError + the status class.
_KERNEL_BY_CODE = {
    code: type("Kernel" + cls.__name__, (KernelError, cls),
               {"__module__": __name__,
                "__doc__": f"{cls.__name__} raised from inside a kernel."})
    for code, cls in _BY_CODE.items()
}

# ErrorKind values of the C++ core.
_KIND_STATUS, _KIND_NO_KERNEL, _KIND_PLUGIN, _KIND_TYPE = 0, 1, 2, 3


def _make(code: int, kind: int, message: str, op: str, kernel: str,
          plugin: str) -> DragonError:
    """Build the exception for an error coming from the C++ core."""
    if kind == _KIND_NO_KERNEL:
        cls = NoKernelError
    elif kind == _KIND_PLUGIN:
        cls = PluginError
    elif kind == _KIND_TYPE:
        cls = ArgumentTypeError
    elif kernel:
        cls = _KERNEL_BY_CODE.get(code, KernelError)
    else:
        cls = _BY_CODE.get(code, InternalError)
    return cls(message, op=op, kernel=kernel, plugin=plugin, code=code)
