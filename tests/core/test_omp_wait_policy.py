"""import dragon_core makes the plugins' OpenMP threads wait passively
(sleep, not spin) unless the user set OMP_WAIT_POLICY, and leaves the
environment as it found it (docs/benchmarks.md, "OpenMP wait policy")."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = "import os, dragon_core; print('env:', os.environ.get('OMP_WAIT_POLICY'))"


def _run(extra_env: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update(extra_env, OMP_DISPLAY_ENV="true")   # libgomp prints its settings at load
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env=env, timeout=120)


def _uses_libgomp() -> bool:
    import dragon_core  # noqa: F401
    with open("/proc/self/maps") as f:
        return "libgomp" in f.read()


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _uses_libgomp(),
                    reason="no plugin of this install loads GNU OpenMP")
@pytest.mark.parametrize("user,want", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_openmp_waits_passively_unless_the_user_chose(user, want):
    proc = _run({} if user is None else {"OMP_WAIT_POLICY": user})
    assert proc.returncode == 0, proc.stderr
    assert f"OMP_WAIT_POLICY = '{want}'" in proc.stderr, proc.stderr[-2000:]
    # The variable is put back: libraries loaded later keep their defaults.
    assert f"env: {user}" in proc.stdout, proc.stdout
