"""``python -m dragon_core.vm.tensorflow script.py [args]``: run a TensorFlow
script unmodified, with ``import tensorflow`` (and ``tensorflow.keras``,
``keras``) resolving to dragon_core.vm.tensorflow."""

from __future__ import annotations

import runpy
import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    import dragon_core.vm.tensorflow as tf
    sys.modules["tensorflow"] = tf
    sys.modules["keras"] = tf.keras
    for name in ("keras", "nn", "math", "linalg", "random"):
        sys.modules[f"tensorflow.{name}"] = getattr(tf, name)
    for name in ("layers", "models", "optimizers", "losses", "metrics", "callbacks",
                 "initializers", "activations", "utils"):
        mod = getattr(tf.keras, name)
        sys.modules[f"tensorflow.keras.{name}"] = mod
        sys.modules[f"keras.{name}"] = mod
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
