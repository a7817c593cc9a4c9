"""DRAGON_STRICT=1: missing kernels are import-time errors, not run-time surprises."""

import os
import subprocess
import sys


def _run(env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAGON_")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", "import dragon_core; print('ok')"],
                          env=env, capture_output=True, text=True, timeout=120)


def test_strict_without_any_kernel_plugin_fails_at_import():
    proc = _run({"DRAGON_DISABLE_PLUGINS": "all", "DRAGON_STRICT": "1"})
    assert proc.returncode != 0
    assert "have no kernel on any device" in proc.stderr
    assert "Add" in proc.stderr
    assert "pip install dragon-cpu-eigen" in proc.stderr or "re-enable" in proc.stderr


def test_same_setup_without_strict_imports():
    proc = _run({"DRAGON_DISABLE_PLUGINS": "all"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_strict_with_cpu_eigen_imports():
    proc = _run({"DRAGON_STRICT": "1"})
    assert proc.returncode == 0, proc.stderr


def test_missing_dtype_of_an_installed_provider_says_so():
    """The provider wheel is loaded but has no kernel for this dtype: the
    hint says so and points at explain(), not at a wheel to install."""
    import numpy as np
    import pytest
    import dragon_core as dg
    x = dg.tensor(np.ones((2, 2), np.float16))
    with pytest.raises(dg.errors.NoKernelError) as err:
        dg.ops.matmul_bias_act(x, x, dg.tensor(np.ones(2, np.float16)))
    message = str(err.value)
    assert "dragon-cpu-eigen is installed and has no 'MatMulBiasAct' kernel" in message
    assert "pip install dragon-cpu-eigen" not in message
    assert "dragon_core.plugins.explain('MatMulBiasAct'" in message
