"""Gradient rules of the standard ops, one module per op family.

Every rule is a composition of ops (so it is differentiable again) and is
registered with :func:`dragon_core._autograd.gradient`.
"""

from . import _util  # noqa: F401
from . import arithmetic  # noqa: F401
from . import int_math  # noqa: F401
from . import binary, reduce, linalg  # noqa: F401
from . import conv  # noqa: F401
from . import shape  # noqa: F401
from . import unary  # noqa: F401
from . import loss, nn_misc  # noqa: F401
from . import norm, pool  # noqa: F401
from . import sort  # noqa: F401
from . import attention  # noqa: F401
from . import rnn  # noqa: F401
from . import conv3d  # noqa: F401
from . import pool3d  # noqa: F401
from . import fft  # noqa: F401
