"""Optimizers, gradient clipping and learning-rate schedulers.

The optimizers follow ``torch.optim`` (parameter groups, ``step``,
``zero_grad``, ``state_dict``) and update each parameter with one fused
op (``SgdUpdate``, ``AdamUpdate``, ``RmspropUpdate``, ``AdagradUpdate``).
Learning rates and step counts live in tensors, so a whole training step,
update included, compiles into one graph with ``@dragon_core.function``::

    opt = dg.optim.Adam([w, b], lr=1e-3)

    @dg.function
    def train_step(x, y):
        with dg.GradientTape() as tape:
            tape.watch([w, b])
            loss = dg.ops.mean(dg.ops.square(x @ w + b - y))
        opt.step(tape.gradient(loss, [w, b]))
        return loss

See docs/optim.md.
"""

from . import lr_scheduler
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .clip import (clip_grad_norm_, clip_grad_value_, clip_grads_by_norm,
                   clip_grads_by_value, total_norm)
from .optimizer import Optimizer, ParamGroup
from .rmsprop import RMSprop
from .sgd import SGD
