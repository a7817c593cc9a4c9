"""``torch.nn``: modules, ``functional``, ``init``, ``utils``."""

from . import functional, init, utils  # noqa: F401
from .modules import *  # noqa: F401,F403
from .modules import Module, Parameter  # noqa: F401
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell  # noqa: F401
from .transformer import (MultiheadAttention, TransformerEncoder,  # noqa: F401
                          TransformerEncoderLayer)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.nn.{name} is not supported by dragon_core.vm.torch; "
                              "see docs/from-pytorch.md (build it from supported layers, or "
                              "use dragon_core.nn on tensor.dragon())")
