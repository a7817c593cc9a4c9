"""``destroy_process_group`` on a real NCCL world of one joined by
environment rendezvous (test_nccl_dist.py, GPU check; issue 16): every
group's communicator is destroyed once (``NcclCommDestroy`` returns 1),
a second destroy frees nothing, the failure path aborts (2), and the world
can be initialised again with working collectives each time. Prints
``DESTROY NCCL OK``.
"""

from __future__ import annotations

import numpy as np

import dragon_core as dg
import dragon_core.distributed as dist

codes = []
real = dist._nccl_comm_destroy


def spy(g, abort=False):
    code = real(g, abort)
    codes.append((g.id, abort, code))
    return code


dist._nccl_comm_destroy = spy
x = np.arange(6, dtype=np.float32).reshape(2, 3)


def check_collectives(group=None):
    t = dg.tensor(x).to("cuda")
    dist.all_reduce(t, group=group)
    np.testing.assert_array_equal(t.cpu().numpy(), x)


for round_ in range(3):
    dist.init_process_group(backend="nccl", init_method="env://", timeout=120)
    g = dist.new_group([0])
    check_collectives()
    check_collectives(g)
    codes.clear()
    if round_ < 2:
        dist.destroy_process_group(g)
        dist.destroy_process_group(g)
        assert codes == [(1, False, 1)], codes
        try:
            dist.all_reduce(dg.tensor(x).to("cuda"), group=g)
            raise AssertionError("a destroyed group ran a collective")
        except RuntimeError as e:
            assert "was destroyed" in str(e), e
        check_collectives()              # the world still works
        dist.destroy_process_group()
        dist.destroy_process_group()
        assert codes == [(1, False, 1), (0, False, 1)], codes
    else:                                # the failure path: aborted
        dist.destroy_process_group(_failed=True)
        assert codes == [(0, True, 2), (1, True, 2)], codes
    assert not dist.is_initialized()
    # the op itself: nothing left to free for either group
    assert int(dg.ops.nccl_comm_destroy(group=0).numpy()) == 0
    assert int(dg.ops.nccl_comm_destroy(group=1).numpy()) == 0
    print(f"round {round_}: {codes}", flush=True)

print("DESTROY NCCL OK", flush=True)
