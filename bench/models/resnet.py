"""ResNet-18 (torchvision's architecture) for any ``nn`` namespace.

``resnet18(nn)`` builds the network from ``dragon_core.nn`` or ``torch.nn``
(the layer names and arguments are the same), so the benchmarks run one
definition in every library: a 7x7 stride-2 convolution, batch norm, ReLU,
a 3x3 stride-2 max-pool, four stages of two BasicBlocks (64, 128, 256, 512
channels; the first block of stages 2-4 has stride 2 and a 1x1 convolution
+ batch norm on its shortcut), global average pooling and a 1000-way fully
connected layer. Convolutions have no bias (batch norm follows each one).

The parameter and buffer names are torchvision's (``conv1.weight``,
``layer2.0.downsample.0.weight``, ``bn1.running_var``, ``fc.bias``...), so
:func:`random_state` gives one set of weights that loads into both.
"""

from __future__ import annotations

import numpy as np

#: (output channels, stride of the first block) of the four stages.
STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))
BLOCKS_PER_STAGE = 2
BN_EPS = 1e-5


def resnet18(nn, num_classes: int = 1000):
    """Return ResNet-18 built from the layer classes of ``nn``.

    Parameters
    ----------
    nn : module
        ``dragon_core.nn`` or ``torch.nn``.
    num_classes : int
        Width of the final fully connected layer.

    Returns
    -------
    nn.Module
        The network, in training mode (call ``.eval()`` for inference).
    """

    def conv_bn(cin, cout, kernel, stride):
        conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)
        return conv, nn.BatchNorm2d(cout, eps=BN_EPS)

    class BasicBlock(nn.Module):
        """Two 3x3 conv-bn pairs and a shortcut (a 1x1 conv-bn when the shape changes)."""

        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1, self.bn1 = conv_bn(cin, cout, 3, stride)
            self.relu = nn.ReLU()
            self.conv2, self.bn2 = conv_bn(cout, cout, 3, 1)
            self.has_downsample = stride != 1 or cin != cout
            if self.has_downsample:
                self.downsample = nn.Sequential(*conv_bn(cin, cout, 1, stride))

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            shortcut = self.downsample(x) if self.has_downsample else x
            return self.relu(out + shortcut)

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = conv_bn(3, 64, 7, 2)
            self.relu = nn.ReLU()
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            cin = 64
            for i, (cout, stride) in enumerate(STAGES, 1):
                blocks = [BasicBlock(cin if b == 0 else cout, cout, stride if b == 0 else 1)
                          for b in range(BLOCKS_PER_STAGE)]
                setattr(self, f"layer{i}", nn.Sequential(*blocks))
                cin = cout
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.flatten = nn.Flatten()
            self.fc = nn.Linear(cin, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            for i in range(1, len(STAGES) + 1):
                x = getattr(self, f"layer{i}")(x)
            return self.fc(self.flatten(self.avgpool(x)))

    return ResNet18()


def random_state(shapes: dict, seed: int = 0) -> dict:
    """Deterministic float32 weights for every entry of a ResNet state dict.

    Convolutions get He-normal weights, the fully connected layer
    torch's default uniform bound, and every batch norm non-trivial affine
    parameters and running statistics (so a wrong normalisation shows in
    the output).

    Parameters
    ----------
    shapes : dict of str to tuple of int
        Name -> shape, e.g. ``{k: tuple(v.shape) for k, v in
        model.state_dict().items()}``; entries that are not floating-point
        weights (torch's ``num_batches_tracked``) must be left out.
    seed : int
        Seed of the NumPy generator.

    Returns
    -------
    dict of str to numpy.ndarray
        Name -> float32 array of that shape.
    """
    rng = np.random.default_rng(seed)
    state = {}
    for name, shape in shapes.items():
        leaf = name.rsplit(".", 1)[-1]
        if len(shape) == 4:                        # a convolution's filter
            fan_in = int(np.prod(shape[1:]))
            value = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        elif name.startswith("fc."):
            bound = 1.0 / np.sqrt(shapes["fc.weight"][1])
            value = rng.uniform(-bound, bound, shape)
        elif leaf in ("weight", "running_var"):    # batch norm scale / variance
            value = rng.uniform(0.5, 1.5, shape)
        else:                                      # batch norm shift / mean
            value = rng.standard_normal(shape) * 0.1
        state[name] = value.astype(np.float32)
    return state


def float_shapes(state_dict) -> dict:
    """Name -> shape of the floating-point entries of a state dict (drops
    torch's integer ``num_batches_tracked`` counters)."""
    return {k: tuple(v.shape) for k, v in state_dict.items()
            if not k.endswith("num_batches_tracked")}
