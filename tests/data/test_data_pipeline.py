"""RecordPipeline with worker processes: order, errors, shutdown."""

from __future__ import annotations

import gc
import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import dragon_core as dg
from dragon_core.data import (DataError, DataTimeoutError, RecordPipeline, WorkerError)
from _data_helpers import (DieOn, FailOn, NoisyId, Sleepy, descendants, record_id,
                           wait_gone, write_records)

HELPERS = os.path.dirname(os.path.abspath(__file__))


def _ids(pipe):
    return [int(i) for b in pipe for i in np.asarray(b.numpy() if hasattr(b, "numpy") else b)]


@pytest.mark.parametrize("mode", ["none", "example", "chunk"])
def test_workers_match_in_process_order(records_100, mode):
    kw = dict(shuffle=mode, seed=7, rank=1, world_size=3, chunk_size=6, transformer=record_id)
    reference = RecordPipeline(records_100, 5, num_readers=0, **kw)
    with RecordPipeline(records_100, 5, num_readers=2, num_transformers=2, timeout=60,
                        **kw) as pipe:
        for _ in range(2):                           # two epochs, persistent workers
            want = _ids(reference)
            got = _ids(pipe)
            assert got == want and len(got) == 33
        assert len(set(pipe.worker_pids)) == 4


def test_default_transformer_batches_dicts(records_100):
    with RecordPipeline(records_100, 8, shuffle="example", drop_last=True, timeout=60,
                        num_transformers=1) as pipe:
        batches = list(pipe)
    assert len(batches) == len(pipe) == 12
    b = batches[0]
    assert isinstance(b["x"], dg.Tensor) and b["x"].shape == (8, 3)
    assert b["x"].dtype == dg.float32 and b["y"].dtype == dg.int64
    ys = [y for b in batches for y in b["y"].tolist()]
    assert len(set(ys)) == 96
    assert np.array_equal(batches[3]["x"].numpy()[:, 0], batches[3]["y"].numpy())


def test_seeded_augmentation_is_reproducible(records_100):
    def run(readers, transformers, epoch):
        p = RecordPipeline(records_100, None, transformer=NoisyId(), shuffle="chunk",
                           seed=11, chunk_size=10, num_readers=readers,
                           num_transformers=transformers, timeout=60)
        p.set_epoch(epoch)
        with p:
            return list(p)
    first = run(0, 0, 0)
    assert run(1, 2, 0) == first                     # same examples, same noise
    again = run(0, 0, 1)
    assert sorted(i for i, _ in again) == list(range(100))
    assert [i for i, _ in again] != [i for i, _ in first]
    assert dict(again) != dict(first)                # noise changes per epoch


def test_epoch_counter_and_set_epoch(records_100):
    pipe = RecordPipeline(records_100, 10, transformer=record_id, shuffle="example",
                          num_readers=0)
    e0, e1 = _ids(pipe), _ids(pipe)
    assert e0 != e1 and pipe.epoch == 2
    pipe.set_epoch(0)
    assert _ids(pipe) == e0


def test_transformer_error_has_worker_traceback(records_100):
    with RecordPipeline(records_100, 4, transformer=FailOn(13), num_transformers=2,
                        timeout=60) as pipe:
        with pytest.raises(WorkerError) as info:
            list(pipe)
        err = info.value
        assert err.index == 13 and err.stage == "transformer"
        text = str(err)
        assert "record 13" in text and "Traceback (most recent call last)" in text
        assert "ValueError: cannot augment record 13" in text
        assert "in augment" in text and "_data_helpers.py" in text
        # a failing record does not break the pipeline: the next epoch runs again
        with pytest.raises(WorkerError, match="record 13"):
            list(pipe)


def test_reader_error_on_corrupt_file(tmp_path):
    path = write_records(tmp_path / "c.dgr", 10)
    from dragon_core.data import RecordReader
    offset = int(RecordReader(path)._bounds[6]) + 20
    data = bytearray(open(path, "rb").read())
    data[offset] ^= 1
    open(path, "wb").write(bytes(data))
    with RecordPipeline(path, 2, num_transformers=1, timeout=60) as pipe:
        with pytest.raises(WorkerError) as info:
            list(pipe)
    assert info.value.stage == "reader" and info.value.index == 6
    assert "RecordError" in str(info.value) and f"{path}, record 6" in str(info.value)


def test_dead_worker_is_reported(records_100):
    pipe = RecordPipeline(records_100, 4, transformer=DieOn(30), num_transformers=1,
                          timeout=60)
    start = time.monotonic()
    with pytest.raises(WorkerError, match="killed by signal SIGKILL") as info:
        list(pipe)
    assert time.monotonic() - start < 20
    assert info.value.exitcode == -signal.SIGKILL
    assert wait_gone(pipe.worker_pids) == []         # the others were stopped too


def test_hanging_transformer_times_out(records_100):
    with RecordPipeline(records_100, 2, transformer=Sleepy(3, 30.0), num_transformers=1,
                        timeout=1.0) as pipe:
        start = time.monotonic()
        with pytest.raises(DataTimeoutError, match="no example for 1 s"):
            list(pipe)
        assert time.monotonic() - start < 15
        pids = pipe.worker_pids
    assert wait_gone(pids) == []


def test_consumer_exception_and_close_reap_workers(records_100):
    with pytest.raises(RuntimeError, match="consumer"):
        with RecordPipeline(records_100, 4, transformer=record_id, timeout=60) as pipe:
            for _ in pipe:
                pids = pipe.worker_pids
                raise RuntimeError("consumer failed")
    assert len(pids) == 3 and wait_gone(pids) == []
    with pytest.raises(ValueError, match="closed"):
        iter(pipe)


def test_abandoned_epoch_then_new_one(records_100):
    with RecordPipeline(records_100, 4, transformer=record_id, timeout=60) as pipe:
        it = iter(pipe)
        next(it)
        del it                                        # stop mid-epoch
        assert sorted(_ids(pipe)) == list(range(100))  # stale items are ignored


def test_garbage_collection_reaps_workers(records_100):
    pipe = RecordPipeline(records_100, 4, transformer=record_id, timeout=60)
    next(iter(pipe))
    pids = pipe.worker_pids
    del pipe
    gc.collect()
    assert wait_gone(pids) == []


def test_closed_pool_refuses(records_100):
    pipe = RecordPipeline(records_100, 4, transformer=record_id, timeout=60)
    next(iter(pipe))
    pipe._pool.close()
    with pytest.raises(DataError, match="closed"):
        list(pipe._pool.run(0, np.arange(3)))
    pipe.close()


# ------------------------------------------------------------------ subprocesses

SCRIPT = """
import faulthandler, os, signal, sys, time
faulthandler.register(signal.SIGUSR1, all_threads=True)   # stacks if the test sees a hang
# Ctrl-C as at a terminal, even when the test runs under nohup or in a
# background job (which start children with SIGINT ignored).
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {helpers!r})
import dragon_core.data as d
from _data_helpers import record_id

if __name__ == "__main__":
    pipe = d.RecordPipeline({path!r}, 2, transformer=record_id, num_transformers=2,
                            shuffle="example", timeout=60)
    next(iter(pipe))
    print("ready", flush=True)
    mode = {mode!r}
    if mode == "raise":
        for batch in pipe:
            raise RuntimeError("consumer exploded")
    while True:
        for batch in pipe:
            time.sleep(0.01)
"""


def _run_script(tmp_path, path, mode):
    script = tmp_path / f"run_{mode}.py"
    script.write_text(textwrap.dedent(SCRIPT.format(helpers=HELPERS, path=path, mode=mode)))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    if not ready or proc.stdout.readline().strip() != "ready":
        proc.kill()
        pytest.fail(f"script did not start: {proc.communicate(timeout=10)}")
    return proc


def _finish(proc):
    try:
        return proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        try:                                          # blocked / ignored signal masks
            with open(f"/proc/{proc.pid}/status") as f:
                masks = "".join(l for l in f if l.startswith(("SigBlk", "SigIgn", "SigPnd",
                                                               "ShdPnd", "SigCgt")))
        except OSError:
            masks = "(no /proc status)"
        os.kill(proc.pid, signal.SIGUSR1)            # faulthandler: dump every thread
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"the script hung on exit; signal masks:\n{masks}its threads:\n"
                    f"{err[-6000:]}")


def test_ctrl_c_leaves_no_process(tmp_path, records_100):
    proc = _run_script(tmp_path, records_100, "loop")
    children = descendants(proc.pid)
    assert len(children) >= 3                        # 3 workers (+ the fork server)
    os.killpg(proc.pid, signal.SIGINT)               # Ctrl-C: the whole process group
    _, err = _finish(proc)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    assert wait_gone(children) == []


def test_consumer_exception_leaves_no_process(tmp_path, records_100):
    proc = _run_script(tmp_path, records_100, "raise")
    children = descendants(proc.pid)
    _, err = _finish(proc)
    assert proc.returncode == 1 and "consumer exploded" in err
    assert wait_gone(children) == []


def test_parent_death_leaves_no_process(tmp_path, records_100):
    proc = _run_script(tmp_path, records_100, "loop")
    children = descendants(proc.pid)
    assert len(children) >= 3
    proc.kill()                                       # SIGKILL: no cleanup code runs
    proc.communicate(timeout=30)
    assert wait_gone(children, timeout=15) == []
