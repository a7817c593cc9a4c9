"""ONNX models in and out of Dragon.

- :func:`load` reads an ONNX model (a path, bytes or a ``ModelProto``) and
  returns a compiled Dragon callable (:class:`OnnxFunction`): a
  ``dragon_core.function`` graph built from the model's nodes, one small
  translation per ONNX op (``_import_ops.py``).
- :func:`export` writes a ``dragon_core.function`` graph or a Module's
  traced ``forward`` as an ONNX model, one small translation per Dragon op
  (``_export_ops.py``).

The ``onnx`` package is needed by both (``pip install onnx``); it is
imported when they are called, never by ``import dragon_core``. See
docs/onnx.md.
"""

from __future__ import annotations

from ._errors import UnsupportedModelError, UnsupportedNode
from ._load import OnnxFunction, load, supported_ops
from ._export import export

__all__ = ["load", "export", "OnnxFunction", "UnsupportedModelError", "UnsupportedNode",
           "supported_ops"]
