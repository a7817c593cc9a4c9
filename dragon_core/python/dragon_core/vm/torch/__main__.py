"""``python -m dragon_core.vm.torch script.py [args]``: run an unmodified
PyTorch script with ``torch`` (and its submodules) mapped to
``dragon_core.vm.torch`` for the script's run only."""

from __future__ import annotations

import runpy
import sys


def _alias_table():
    import dragon_core.vm.torch as vt
    table = {"torch": vt}
    for name in ("nn", "nn.functional", "nn.init", "nn.utils", "nn.modules", "optim",
                 "optim.lr_scheduler", "utils", "utils.data", "autograd", "jit", "linalg",
                 "cuda", "backends", "testing", "serialization", "amp", "cpu", "cpu.amp",
                 "cuda.amp"):
        mod = sys.modules.get(f"dragon_core.vm.torch.{name}")
        if mod is None:
            __import__(f"dragon_core.vm.torch.{name}")
            mod = sys.modules[f"dragon_core.vm.torch.{name}"]
        table[f"torch.{name}"] = mod
    return table


def run(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m dragon_core.vm.torch script.py [args...]\n\nRuns script.py "
              "with `import torch` giving dragon_core.vm.torch.")
        return 0 if argv else 2
    table = _alias_table()
    saved = {k: sys.modules.get(k) for k in table}
    saved_argv = sys.argv
    sys.modules.update(table)
    sys.argv = list(argv)
    try:
        runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved_argv
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
