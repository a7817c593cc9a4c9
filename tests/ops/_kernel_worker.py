"""Worker of tests/ops/test_differential_kernels.py (run as a script).

Reads one JSON case spec per line on stdin, answers one JSON line per spec
on the file descriptor named by argv[1]. Its own fd 1 goes to a log file so
that oneDNN's ONEDNN_VERBOSE lines (set by the parent) can be read back:
they are the evidence of which oneDNN primitive kinds each phase executed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile


def main() -> None:
    answer = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    log = tempfile.TemporaryFile()
    sys.stdout.flush()
    os.dup2(log.fileno(), 1)
    pos = [0]

    def prims():
        log.flush()
        end = os.lseek(log.fileno(), 0, os.SEEK_END)
        os.lseek(log.fileno(), pos[0], os.SEEK_SET)
        data = os.read(log.fileno(), end - pos[0]) if end > pos[0] else b""
        pos[0] = end
        kinds = []
        for line in data.decode(errors="replace").splitlines():
            f = line.split(",")
            if len(f) > 4 and f[0] == "onednn_verbose" and f[1] == "exec" and f[3] != "reorder":
                if f[3] not in kinds:
                    kinds.append(f[3])
        return kinds

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import dragon_core as dc
    import torch

    from _kernel_cases import Runner

    torch.set_num_threads(1)
    runner = Runner(dc, torch, prims)
    for line in sys.stdin:
        spec = json.loads(line)
        try:
            res = runner.run(spec)
        except Exception as e:  # pragma: no cover - reported to the parent
            res = {"error": {"error": {"error": f"{type(e).__name__}: {e}"}}}
        answer.write(json.dumps({"id": spec["id"], "result": res}) + "\n")


if __name__ == "__main__":
    main()
