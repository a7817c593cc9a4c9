"""Errors of the ONNX importer and exporter."""

from __future__ import annotations

from typing import NamedTuple


class UnsupportedNode(NamedTuple):
    """One node the importer (or one op the exporter) cannot translate."""

    op_type: str
    domain: str
    opset: int
    name: str
    reason: str

    def __str__(self) -> str:
        dom = f"{self.domain}::" if self.domain not in ("", "ai.onnx") else ""
        return (f"{dom}{self.op_type} (opset {self.opset}) node '{self.name}': "
                f"{self.reason}")


class UnsupportedModelError(NotImplementedError):
    """A model holds ops (or op variants) Dragon cannot express.

    Raised by :func:`dragon_core.onnx.load` before anything runs, and by
    :func:`dragon_core.onnx.export` before anything is written; ``nodes``
    lists every offending node, not only the first.
    """

    def __init__(self, what: str, nodes: list):
        self.nodes = list(nodes)
        lines = "\n".join(f"  - {n}" for n in self.nodes)
        super().__init__(f"{what}: {len(self.nodes)} unsupported node(s):\n{lines}")


class NeedStatic(Exception):
    """Internal: a node needs the value of a tensor that depends on the data
    of the named graph inputs (a Reshape target fed by the caller); the
    loader then keys its traces on those inputs' values and retraces."""

    def __init__(self, inputs):
        super().__init__(sorted(inputs))
        self.inputs = frozenset(inputs)
