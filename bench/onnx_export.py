"""Build the ONNX equivalent of ``bench/models/resnet.py``'s ResNet-18.

``resnet18_onnx(state, input_shape)`` writes the network node by node with
``onnx.helper`` from a state dict of NumPy arrays (torchvision's names, as
``model.state_dict()`` gives them in Dragon or torch): Conv, BatchNormalization
(inference form, running statistics), Relu, MaxPool, Add, GlobalAveragePool,
Flatten and Gemm. Every weight becomes an initializer under its state-dict
name, so the model computes exactly what the Dragon and torch modules compute
with the same weights; the benchmark checks that before timing.

Opset 21 with IR version 10 (onnxruntime >= 1.20 reads it).
"""

from __future__ import annotations

import numpy as np
from models.resnet import BLOCKS_PER_STAGE, BN_EPS, STAGES

OPSET = 21
IR_VERSION = 10


class _Builder:
    """Appends nodes and initializers; names each output after its node."""

    def __init__(self, helper, numpy_helper, state: dict):
        self.helper, self.numpy_helper = helper, numpy_helper
        self.state = state
        self.nodes, self.inits, self._used = [], [], set()

    def weight(self, name: str) -> str:
        """Declare state entry ``name`` as an initializer (once) and return it."""
        if name not in self._used:
            value = np.ascontiguousarray(self.state[name], dtype=np.float32)
            self.inits.append(self.numpy_helper.from_array(value, name))
            self._used.add(name)
        return name

    def node(self, op: str, inputs: list, name: str, **attrs) -> str:
        self.nodes.append(self.helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def conv_bn(self, x: str, conv: str, bn: str, stride: int, relu: bool) -> str:
        """Conv (no bias, 'same'-style padding k // 2) + BatchNormalization
        [+ Relu]; ``conv``/``bn`` are the state-dict prefixes."""
        k = int(self.state[f"{conv}.weight"].shape[-1])
        y = self.node("Conv", [x, self.weight(f"{conv}.weight")], conv,
                      kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
        y = self.node("BatchNormalization",
                      [y] + [self.weight(f"{bn}.{p}") for p in
                             ("weight", "bias", "running_mean", "running_var")],
                      bn, epsilon=BN_EPS)
        return self.node("Relu", [y], f"{bn}.relu") if relu else y

    def basic_block(self, x: str, prefix: str, stride: int) -> str:
        out = self.conv_bn(x, f"{prefix}.conv1", f"{prefix}.bn1", stride, relu=True)
        out = self.conv_bn(out, f"{prefix}.conv2", f"{prefix}.bn2", 1, relu=False)
        if f"{prefix}.downsample.0.weight" in self.state:
            x = self.conv_bn(x, f"{prefix}.downsample.0", f"{prefix}.downsample.1", stride,
                             relu=False)
        return self.node("Relu", [self.node("Add", [out, x], f"{prefix}.add")],
                         f"{prefix}.relu")


def resnet18_onnx(state: dict, input_shape) -> onnx.ModelProto:  # noqa: F821
    """The ONNX model of ResNet-18 with the weights of ``state``.

    Parameters
    ----------
    state : dict of str to numpy.ndarray
        The float weights and batch-norm statistics under torchvision's names
        (see ``models.resnet.float_shapes``).
    input_shape : sequence of int
        ``[N, 3, H, W]`` of the graph input ``x``; the output ``y`` is
        ``[N, num_classes]``.

    Returns
    -------
    onnx.ModelProto
        A model that passed ``onnx.checker.check_model``.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    b = _Builder(helper, numpy_helper, state)
    x = b.conv_bn("x", "conv1", "bn1", 2, relu=True)
    x = b.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    for i, (_, stride) in enumerate(STAGES, 1):
        for j in range(BLOCKS_PER_STAGE):
            x = b.basic_block(x, f"layer{i}.{j}", stride if j == 0 else 1)
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x], "avgpool")], "flatten", axis=1)
    b.nodes.append(helper.make_node(
        "Gemm", [x, b.weight("fc.weight"), b.weight("fc.bias")], ["y"], name="fc", transB=1))
    classes = int(state["fc.weight"].shape[0])
    graph = helper.make_graph(
        b.nodes, "resnet18",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(input_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [input_shape[0], classes])],
        b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model
