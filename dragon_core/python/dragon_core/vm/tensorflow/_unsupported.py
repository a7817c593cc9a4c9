"""What a name we do not provide raises: NotImplementedError naming the
alternative, never AttributeError (private and dunder names excepted, so
``hasattr``, ``copy`` and ``inspect`` keep working)."""

from __future__ import annotations


class UnsupportedError(NotImplementedError):
    """A TensorFlow name dragon_core.vm.tensorflow does not provide."""


def unsupported(qualname: str, alternative: str | None = None) -> UnsupportedError:
    """The error for ``qualname`` (e.g. ``"tf.nn.ctc_loss"``)."""
    msg = f"{qualname} is not supported by dragon_core.vm.tensorflow"
    if alternative:
        msg += f"; use {alternative} instead"
    else:
        msg += ("; see docs/from-tensorflow.md for what is supported, or write it with the "
                "supported tf ops or dragon_core.ops")
    return UnsupportedError(msg)


def module_getattr(prefix: str, hints: dict | None = None):
    """A module-level ``__getattr__`` raising :class:`UnsupportedError`."""
    hints = dict(hints or {})

    def __getattr__(name: str):
        if name.startswith("_"):
            raise AttributeError(f"module {prefix!r} has no attribute {name!r}")
        raise unsupported(f"{prefix}.{name}", hints.get(name))
    return __getattr__


class UnsupportedAttrs:
    """Mixin: unknown public attributes of an object raise UnsupportedError."""

    _tf_qualname = "object"

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise unsupported(f"{self._tf_qualname}.{name}")
