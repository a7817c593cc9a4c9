"""``dragon_core.nn``: layers, losses and initialisers (PyTorch's names).

Modules run eagerly and inside ``@dragon_core.function``; every layer is a
thin shell over ops of the standard library, so any device whose plugin
provides the ops runs them.
"""

from . import functional, init
from .activation import (ELU, GELU, Dropout, LeakyReLU, LogSoftmax, ReLU, ReLU6, Sigmoid,
                         SiLU, Softmax, Softplus, Tanh)
from .container import ModuleDict, ModuleList, Sequential
from .conv import Conv2d, ConvTranspose2d
from .linear import Embedding, Flatten, Identity, Linear
from .loss import (BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss,
                   SigmoidFocalLoss, SmoothL1Loss)
from .module import Module
from .normalization import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm
from .parameter import Parameter
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d

__all__ = [
    "Module", "Parameter", "Sequential", "ModuleList", "ModuleDict",
    "Linear", "Identity", "Flatten", "Embedding", "Conv2d", "ConvTranspose2d",
    "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
    "BatchNorm1d", "BatchNorm2d", "LayerNorm", "GroupNorm", "Dropout",
    "ReLU", "ReLU6", "LeakyReLU", "ELU", "GELU", "SiLU", "Sigmoid", "Tanh", "Softplus",
    "Softmax", "LogSoftmax",
    "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "BCEWithLogitsLoss",
    "SigmoidFocalLoss", "functional", "init",
]
