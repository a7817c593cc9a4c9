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
print("softmax rows sum to", dg.ops.softmax(y, axis=-1).sum(axis=[-1]).numpy())

ref = np.maximum(x.numpy() @ w.numpy() + 1.0, 0)
assert np.allclose(y.numpy(), ref, atol=1e-5), "mismatch against NumPy"
print("matches NumPy: yes")
print()
print(dg.plugins.explain("MatMul", "cpu", "float32"))

# Autograd and graph mode: fit y = 3x - 1 with the same step run eagerly and
# as one compiled graph (forward, backward and update in the C++ executor).
rng = np.random.default_rng(0)
xs = dg.tensor(rng.standard_normal((256, 1)).astype(np.float32))
ys = xs * 3.0 - 1.0
for mode in ("eager", "graph"):
    w, b = dg.ops.zeros([1, 1]), dg.ops.zeros([1])

    def step(x, y):
        with dg.GradientTape() as tape:
            tape.watch([w, b])
            loss = dg.ops.mean(dg.ops.square(x @ w + b - y))
        gw, gb = tape.gradient(loss, [w, b])
        w.assign(w - 0.1 * gw)
        b.assign(b - 0.1 * gb)
        return loss

    compiled = dg.function(step)
    run = compiled if mode == "graph" else step
    for _ in range(100):
        loss = run(xs, ys)
    print(f"{mode}: w={w.item():.4f} b={b.item():.4f} loss={loss.item():.2e}")
    assert abs(w.item() - 3.0) < 1e-3 and abs(b.item() + 1.0) < 1e-3
g = compiled.get_graph(xs, ys)
print(f"graph: {len(g.op)} ops after passes {g.metadata['passes']}")
