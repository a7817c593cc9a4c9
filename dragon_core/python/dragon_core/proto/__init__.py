"""Protocol-buffer messages of Dragon's IR (generated at build time)."""

from .dragon_pb2 import (AttrValue, FloatList, GraphDef, IntList, OpDef,  # noqa: F401
                         TensorProto, ValueInfo)
