"""Training summaries: TensorBoard event files and progress bars.

``SummaryWriter(logdir)`` records scalars, histograms, images and graphs
(``add_graph`` accepts a Dragon ``GraphDef`` or a ``@dragon_core.function``
with example inputs). It writes through tensorboardX, imported on first use
(``pip install tensorboardX``). ``progress(iterable)`` is a tqdm bar that is
silent when its output is not a terminal.
"""

from __future__ import annotations

from .progress import progress  # noqa: F401
from .writer import SummaryWriter  # noqa: F401
