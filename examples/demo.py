"""A short tour of Dragon's eager core and its plugin system."""

import numpy as np

import dragon_core as dg
from dragon_core.__main__ import info

print(info())
print()

x = dg.tensor(np.linspace(-2.0, 2.0, 6, dtype=np.float32).reshape(2, 3))
w = dg.ops.random_normal([3, 4], seed=0)
y = dg.ops.relu(x @ w + 1.0)
print("x =", x)
print("relu(x @ w + 1) =", y)
print("softmax rows sum to", dg.ops.softmax(y, axis=-1).sum(axes=[-1]).numpy())

ref = np.maximum(x.numpy() @ w.numpy() + 1.0, 0)
assert np.allclose(y.numpy(), ref, atol=1e-5), "mismatch against NumPy"
print("matches NumPy: yes")
print()
print(dg.plugins.explain("MatMul", "cpu", "float32"))
