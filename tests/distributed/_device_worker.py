"""One rank of test_nccl_device.py: which GPU each NCCL communicator is
created on (issue 16, several GPUs per node). A plain process of an
``env://`` world with the ``nccl`` backend; libnccl and the CUDA driver are
the recording stand-in test_destroy.py builds ($DRAGON_NCCL_LIBRARY and
$DRAGON_CUDA_DRIVER_LIBRARY name it; $FAKE_CUDA_DEVICES devices are
visible; it logs every context switch and communicator to $FAKE_NCCL_LOG).
The real ``NcclCommInit`` op runs. Each step initialises, prints the
device of the world's and of a new group's communicator, and destroys;
``MARK`` lines go to the log too, so the test can cut it into steps.
"""

from __future__ import annotations

import os
import sys

import dragon_core.distributed as dist

TIMEOUT = float(os.environ.get("RDZV_TIMEOUT", "20"))
RANK = int(os.environ["RANK"])


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def mark(step: str) -> None:
    with open(os.environ["FAKE_NCCL_LOG"], "a") as f:
        f.write(f"MARK {step} 0 0\n")


def step(name: str, env: dict, **kw) -> None:
    mark(name)
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        dist.init_process_group(kw.pop("backend", "nccl"), timeout=TIMEOUT, **kw)
    except Exception as e:  # noqa: BLE001 - printed for the test
        say(f"STEP {name} ERR {type(e).__name__}: {e}")
        say(f"STEP {name} initialised {dist.is_initialized()}")
        return
    g = dist.new_group()
    say(f"STEP {name} world={dist._G.world.bound_device_id} group={g.bound_device_id}")
    dist.destroy_process_group()
    say(f"STEP {name} after destroy {g.bound_device_id}")


def main() -> None:
    r = RANK
    step("local_rank", {"LOCAL_RANK": str(r)})
    step("ompi_local_rank", {"LOCAL_RANK": None, "OMPI_COMM_WORLD_LOCAL_RANK": str(1 - r)})
    step("device_id", {"LOCAL_RANK": str(r), "OMPI_COMM_WORLD_LOCAL_RANK": None},
         device_id=1 - r)
    # no backend: device_id implies nccl, as in torch.distributed
    step("device_id_no_backend", {}, backend=None, device_id=1 - r)
    step("device_str", {}, device=f"cuda:{1 - r}")
    step("modulo", {"LOCAL_RANK": str(2 + r), "FAKE_CUDA_DEVICES": "1"})
    step("modulo3", {"LOCAL_RANK": str(3 + r), "FAKE_CUDA_DEVICES": "2"})
    step("none", {"LOCAL_RANK": None})
    step("invisible", {"LOCAL_RANK": str(r)}, device_id=5)
    say("DONE")


if __name__ == "__main__":
    main()
