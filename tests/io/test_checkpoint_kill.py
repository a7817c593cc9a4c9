"""A save killed with SIGKILL half-way never damages the previous checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from dragon_core.serialization import load, save

# The child saves a 64 MiB checkpoint over and over; every element of "w"
# equals "step", so a loaded file is self-consistent or visibly torn.
_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import dragon_core as dg
    from dragon_core.serialization import save

    path = sys.argv[1]
    arr = np.empty(16 * 2**20, dtype=np.float32)
    w = dg.from_numpy(arr)
    for step in range(1, 10_000):
        arr.fill(step)
        save({"step": step, "w": w, "note": "x" * 1000}, path)
        print(step, flush=True)
""")

_DEADLINE_S = 90


def _collect(stream, out: list) -> None:
    """Append each step the child reports (one per line) to ``out``."""
    for line in stream:
        out.append(int(line))


def _partial_temp(folder: str, name: str, full: int):
    """A temporary file of a save to ``name`` that holds some but not all bytes."""
    for n in os.listdir(folder):
        if n.startswith(".tmp-" + name + "."):
            try:
                size = os.stat(os.path.join(folder, n)).st_size
            except FileNotFoundError:
                continue
            if 0 < size < full:
                return n
    return None


def test_sigkill_mid_save_keeps_previous_checkpoint(tmp_path):
    folder, name = str(tmp_path), "model.ckpt"
    path = os.path.join(folder, name)
    deadline = time.monotonic() + _DEADLINE_S
    for _attempt in range(5):
        child = subprocess.Popen([sys.executable, "-c", _CHILD, path],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        done: list[int] = []
        reader = threading.Thread(target=_collect, args=(child.stdout, done), daemon=True)
        reader.start()
        try:
            # Wait until at least one save completed, so a previous file exists.
            while not done and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            if not done:
                died = child.poll() is not None
                pytest.fail("the child saved nothing"
                            + (f"; it exited: {child.stderr.read()}" if died else ""))
            full = os.path.getsize(path)
            victim = None
            while victim is None and child.poll() is None and time.monotonic() < deadline:
                victim = _partial_temp(folder, name, full)
            if victim is not None:
                os.kill(child.pid, signal.SIGKILL)
        finally:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=30)
            reader.join(timeout=30)
            child.stderr.close()
        assert time.monotonic() < deadline, "timed out waiting for a save in progress"
        if victim is None:
            continue
        if not os.path.exists(os.path.join(folder, victim)):
            continue   # that save finished between the check and the kill: try again
        break
    else:
        pytest.fail("never caught the child in the middle of a save")

    assert child.returncode == -signal.SIGKILL
    # The kill landed during the save after the last one reported.
    assert os.path.getsize(os.path.join(folder, victim)) < full
    assert os.path.getsize(path) == full
    ckpt = load(path)
    assert ckpt["step"] == done[-1]
    w = ckpt["w"].numpy()
    assert w.shape == (16 * 2**20,)
    assert np.all(w == np.float32(done[-1]))

    # The stale temporary file does not disturb later saves or loads.
    save({"step": 0}, path)
    assert load(path) == {"step": 0}
