"""Ctrl-C during a RecordPipeline's worker start-up always reaches the main thread.

The main process has BLAS and OpenMP threads (NumPy and a dragon matmul ran
first), so a SIGINT sent to it can be delivered to any of them. Whenever it
arrives — before, during or after the workers start, with a fork server
being launched or already running, for every start method — the main thread
must raise KeyboardInterrupt promptly, and closing the pipeline must reap
every worker.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from _data_helpers import descendants, wait_gone

HELPERS = os.path.dirname(os.path.abspath(__file__))

# One process runs one trial per line of stdin: "<start method>". It prints
# "go" just before it starts iterating (which starts the workers), "ki" as
# soon as the main thread catches KeyboardInterrupt, then reads one more
# epoch with the same pipeline and prints a JSON report.
SCRIPT = """
import faulthandler, json, os, signal, sys, threading, time
faulthandler.register(signal.SIGUSR1, all_threads=True)   # stacks if the test sees a hang
signal.signal(signal.SIGINT, signal.default_int_handler)  # even under nohup / in a job
sys.path.insert(0, {helpers!r})
import numpy as np
import dragon_core as dg
import dragon_core.data as d
from _data_helpers import is_running, record_id

if __name__ == "__main__":
    a = np.random.default_rng(0).random((300, 300))
    float((a @ a).sum())                                     # BLAS threads
    x = dg.tensor(np.ones((256, 256), np.float32))
    float(dg.ops.sum(dg.ops.matmul(x, x)).numpy())           # dragon's OpenMP threads
    print("threads", len(os.listdir("/proc/self/task")), flush=True)
    parent = os.getppid()
    for line in sys.stdin:
        method = line.strip()
        pipe = d.RecordPipeline({path!r}, 2, transformer=record_id, num_readers=2,
                                num_transformers=2, start_method=method, timeout=60)
        try:
            print("go", flush=True)                          # the signal may come at once
            while True:                                      # epochs, forever
                for batch in pipe:
                    pass
                if os.getppid() != parent:                   # the test runner died (killed
                    pipe.close()                             # pytest): no orphan that spins
                    os._exit(3)
        except KeyboardInterrupt:
            where = threading.current_thread() is threading.main_thread()
            print("ki", flush=True)
        # Caught, as a notebook or a training loop would: the pipeline goes on.
        after = [int(i) for b in pipe for i in b.numpy()]
        pids = pipe.worker_pids
        pipe.close()
        alive = [p for p in pids if is_running(p)]
        print(json.dumps({{"main_thread": where, "workers": pids, "alive": alive,
                          "after": after == list(range(100))}}), flush=True)
"""

# Delays (seconds after "go") spread over worker start-up; dense near 0,
# where the workers are being started.
DELAYS = [0.0, 0.001, 0.003, 0.006, 0.01, 0.015, 0.02, 0.03, 0.045, 0.06, 0.08, 0.1,
          0.13, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5]
# "spawn" boots a fresh interpreter per worker (seconds on a loaded machine):
# fewer moments, still spread over the start-up.
SPAWN_DELAYS = [0.0, 0.003, 0.01, 0.03, 0.1, 0.25, 0.5]


class _Lines:
    """Lines of a child's stdout with a deadline each (select on the raw pipe;
    a buffered reader would hide lines it has already read ahead)."""

    def __init__(self, proc, stderr_path):
        self.proc = proc
        self.stderr_path = stderr_path
        self.fd = proc.stdout.fileno()
        self.pending = b""

    def read(self, timeout: float, what: str) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.fd], [], [], max(0.0, left))
            if not ready:
                self.fail(f"no {what} within {timeout} s")
            chunk = os.read(self.fd, 4096)
            if not chunk:
                self.fail(f"the script ended before {what}")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode().strip()

    def fail(self, why: str) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGUSR1)          # faulthandler: every stack
            time.sleep(1.0)
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        err = self.stderr_path.read_text(errors="replace")
        pytest.fail(f"{why}; the script's stderr:\n{err[-6000:]}")


@pytest.mark.parametrize("method", [m for m in ("forkserver", "spawn", "fork")
                                    if m in mp.get_all_start_methods()])
def test_ctrl_c_at_any_moment_of_worker_start_up(tmp_path, records_100, method):
    script = tmp_path / "interrupt.py"
    script.write_text(textwrap.dedent(SCRIPT.format(helpers=HELPERS, path=records_100)))
    stderr_path = tmp_path / "stderr.txt"          # a file: a full pipe would block the script
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=stderr, bufsize=0,
                                start_new_session=True)
    lines = _Lines(proc, stderr_path)
    try:
        threads = lines.read(120, "start-up")
        assert threads.startswith("threads ") and int(threads.split()[1]) >= 3, threads
        seen: set[int] = set()
        for trial, delay in enumerate(SPAWN_DELAYS if method == "spawn" else DELAYS):
            proc.stdin.write(method.encode() + b"\n")
            assert lines.read(60, f"trial {trial}'s start") == "go"
            time.sleep(delay)
            sent = time.monotonic()
            if trial % 2:
                os.killpg(proc.pid, signal.SIGINT)          # Ctrl-C at a terminal
            else:
                os.kill(proc.pid, signal.SIGINT)            # kill -INT <main pid>
            # Lost, the epochs would run forever: the deadline catches that.
            assert lines.read(20, f"KeyboardInterrupt (delay {delay} s)") == "ki"
            latency = time.monotonic() - sent
            report = json.loads(lines.read(30, f"trial {trial}'s report"))
            assert report["main_thread"]
            assert report["after"], f"the epoch after the interrupt is wrong (delay {delay})"
            assert latency < 5.0, f"KeyboardInterrupt took {latency:.2f} s (delay {delay})"
            assert report["alive"] == [], f"workers left after close (delay {delay})"
            seen.update(report["workers"])
        seen.update(descendants(proc.pid))                  # fork server, resource tracker
        proc.stdin.close()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err = stderr_path.read_text(errors="replace")
    assert proc.returncode == 0, err[-6000:]
    assert "Traceback" not in err, err[-6000:]           # no worker was interrupted either
    assert wait_gone(seen) == []


# ------------------------------------------------------------------ hold_sigint

def _sigint_ignored_by_os() -> bool:
    with open("/proc/self/status") as f:
        ignored = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
    return bool(ignored & (1 << (signal.SIGINT - 1)))


@pytest.fixture
def counting_handler():
    """A SIGINT handler of our own for the test (never pytest's), restored after."""
    calls: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: calls.append(signum))
    try:
        yield calls
    finally:
        signal.signal(signal.SIGINT, previous)


def test_hold_sigint_delivers_at_the_end_of_the_block(counting_handler):
    from dragon_core.data._signals import hold_sigint
    handler = signal.getsignal(signal.SIGINT)
    with hold_sigint():
        assert not _sigint_ignored_by_os()          # the OS disposition never changes
        signal.raise_signal(signal.SIGINT)
        assert counting_handler == []               # held
    assert counting_handler == [signal.SIGINT]      # delivered once, right after
    assert signal.getsignal(signal.SIGINT) is handler
    with hold_sigint():
        pass
    assert counting_handler == [signal.SIGINT]      # nothing to deliver


def test_hold_sigint_second_ctrl_c_goes_through_at_once(counting_handler):
    from dragon_core.data._signals import hold_sigint
    with hold_sigint():
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
        assert counting_handler == [signal.SIGINT]  # the way out of a hang
    assert counting_handler == [signal.SIGINT]


def test_hold_sigint_raises_keyboard_interrupt_after_the_block():
    from dragon_core.data._signals import hold_sigint
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    done = False
    try:
        with pytest.raises(KeyboardInterrupt):
            with hold_sigint():
                signal.raise_signal(signal.SIGINT)
                done = True                          # the block was not cut short
    finally:
        signal.signal(signal.SIGINT, previous)
    assert done


def test_hold_sigint_leaves_ignored_sigint_alone():
    from dragon_core.data._signals import hold_sigint
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with hold_sigint():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
