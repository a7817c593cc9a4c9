"""``torch.backends``: the flags scripts set (accepted, no effect)."""

from types import SimpleNamespace

cudnn = SimpleNamespace(benchmark=False, deterministic=False, enabled=True,
                        is_available=lambda: False)
mps = SimpleNamespace(is_available=lambda: False, is_built=lambda: False)
mkldnn = SimpleNamespace(is_available=lambda: True, enabled=True)
cuda = SimpleNamespace(matmul=SimpleNamespace(allow_tf32=False))
