"""The TCP rendezvous store (dragon_core.distributed.store): the
MASTER_ADDR:MASTER_PORT exchange of the NCCL unique id under environment
rendezvous. NCCL cannot run here, so these tests check the store itself:
separate processes exchanging the id bytes, and every failure ending in a
StoreError within its timeout (every wait here is bounded: subprocess and
store timeouts)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from dragon_core.distributed.store import StoreError, TCPStore, exchange_bytes

# One rank of the multi-process test: rank 0 serves the store and publishes
# 128 id bytes; every rank prints the hex of what it got.
_RANK = r"""
import os, sys
from dragon_core.distributed.store import TCPStore, exchange_bytes
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                 is_master=rank == 0, timeout=30, rank=rank)
uid = bytes(range(128)) if rank == 0 else None
got = exchange_bytes(store, "nccl/0", rank, uid)
store.close()
print("UID", got.hex(), flush=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_in_separate_processes_exchange_the_id(world):
    port = _free_port()
    procs = []
    # Start the non-zero ranks first: they retry until rank 0 serves.
    for rank in list(range(1, world)) + [0]:
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(world))
        procs.append(subprocess.Popen([sys.executable, "-c", _RANK], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
        if rank == 1:
            time.sleep(0.3)
    try:
        outs = [p.communicate(timeout=45) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert f"UID {bytes(range(128)).hex()}" in out, out + err


def test_set_get_add_in_one_process():
    with TCPStore("127.0.0.1", 0, 2, is_master=True, timeout=10) as master:
        with TCPStore("127.0.0.1", master.port, 2, is_master=False, timeout=10,
                      rank=1) as client:
            master.set("a", b"\x00\x01binary\xff")
            assert client.get("a") == b"\x00\x01binary\xff"
            client.set("empty", b"")
            assert master.get("empty") == b""
            assert client.add("n", 2) == 2
            assert master.add("n", -5) == -3
            # get waits for a key another rank sets later
            timer = threading.Timer(0.2, lambda: master.set("late", b"x"))
            timer.start()
            t0 = time.monotonic()
            assert client.get("late") == b"x"
            assert time.monotonic() - t0 >= 0.15
            timer.join(10)


@pytest.mark.parametrize("timeout", [float("inf"), 8.64e13])
def test_an_infinite_or_huge_timeout_means_no_deadline(timeout):
    # init_process_group(timeout=inf) hands it to the store: a socket
    # timeout past time_t used to raise OverflowError on the first request
    with TCPStore("127.0.0.1", 0, 2, is_master=True, timeout=timeout) as master:
        with TCPStore("127.0.0.1", master.port, 2, is_master=False, timeout=timeout,
                      rank=1) as client:
            timer = threading.Timer(0.2, lambda: master.set("late", b"x"))
            timer.start()
            assert client.get("late") == b"x" and client.add("n", 3) == 3
            timer.join(10)


def test_get_of_a_key_nobody_sets_times_out_naming_it():
    with TCPStore("127.0.0.1", 0, 2, is_master=True, timeout=0.5) as master:
        t0 = time.monotonic()
        with pytest.raises(StoreError, match=r"rank 0: get\('never'\).*within 0.5 s"):
            master.get("never")
        assert time.monotonic() - t0 < 5


def test_no_server_is_a_clear_error_within_the_timeout():
    port = _free_port()
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=rf"rank 1: could not connect to the store at "
                                         rf"127.0.0.1:{port} within 0.5 s"):
        TCPStore("127.0.0.1", port, 2, is_master=False, timeout=0.5, rank=1)
    assert time.monotonic() - t0 < 5


def test_port_in_use_says_so():
    with TCPStore("127.0.0.1", 0, 2, is_master=True, timeout=5) as master:
        with pytest.raises(StoreError, match="cannot serve the store on 127.0.0.1"):
            TCPStore("127.0.0.1", master.port, 2, is_master=True, timeout=5)


def test_master_gone_fails_the_waiting_reader():
    master = TCPStore("127.0.0.1", 0, 2, is_master=True, timeout=10)
    client = TCPStore("127.0.0.1", master.port, 2, is_master=False, timeout=10, rank=1)
    threading.Timer(0.2, master.close).start()
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=r"rank 1: get\('id'\) .* failed"):
        client.get("id")
    assert time.monotonic() - t0 < 5
    with pytest.raises(StoreError, match="closed store"):
        client.get("id")


def test_bad_arguments():
    with pytest.raises(ValueError, match="world_size"):
        TCPStore("127.0.0.1", 0, 0, is_master=True)
    with pytest.raises(ValueError, match="timeout"):
        TCPStore("127.0.0.1", 0, 1, is_master=True, timeout=0)
    with pytest.raises(ValueError, match="port"):
        TCPStore("127.0.0.1", 0, 2, is_master=False)
    with TCPStore("127.0.0.1", 0, 1, is_master=True, timeout=5) as s:
        with pytest.raises(ValueError, match="at most 1048576"):
            s.set("big", b"x" * (1 << 20 + 1))
        # A world of one: rank 0 needs nobody to read it.
        assert exchange_bytes(s, "id", 0, b"abc") == b"abc"
        with pytest.raises(ValueError, match="rank 0 must give"):
            exchange_bytes(s, "id2", 0, None)


def test_check_never_waits():
    with TCPStore("127.0.0.1", 0, 2, is_master=True, timeout=10) as master:
        with TCPStore("127.0.0.1", master.port, 2, is_master=False, timeout=10,
                      rank=1) as client:
            t0 = time.monotonic()
            assert client.check("k") is False and master.check("k") is False
            client.set("k", b"")
            assert master.check("k") is True and client.check("k") is True
            assert time.monotonic() - t0 < 2


def test_port_is_free_again_once_the_server_closed():
    """A thread blocked in accept() keeps a listening socket bound on Linux
    after a plain close(); the server shuts it down, so a new store (a
    second initialisation) can listen on the same port at once."""
    master = TCPStore("127.0.0.1", 0, 1, is_master=True, timeout=5)
    port = master.port
    master.close()
    again = TCPStore("127.0.0.1", port, 1, is_master=True, timeout=5)
    again.set("x", b"1")
    assert again.get("x") == b"1"
    again.close()


def test_values_already_set_are_still_served_while_closing():
    """Rank 0 publishes an error and keeps serving a moment (linger): a
    get of a key that is set must be answered even after close began."""
    master = TCPStore("127.0.0.1", 0, 2, is_master=True, timeout=10)
    client = TCPStore("127.0.0.1", master.port, 2, is_master=False, timeout=10, rank=1)
    master.set("err", b"why")
    closer = threading.Thread(target=master.close, kwargs={"grace": 3.0})
    closer.start()
    time.sleep(0.2)
    assert client.get("err") == b"why"
    client.close()
    closer.join(10)
    assert not closer.is_alive()


def test_a_set_is_answered_before_a_waiting_closer_can_see_it(monkeypatch):
    """exchange_bytes' rank 0 closes the store as soon as it sees the last
    reader's ack; the reader's set must still get its reply. The server's
    replies are slowed down here (each b"K" waits 0.3 s before it is sent),
    which used to let the close cut the setter off ("connection closed by
    the peer": a CI failure of test_rendezvous under load)."""
    real = socket.socket.sendall

    def slow_ack(self, data, *args):
        if bytes(data) == b"K":
            time.sleep(0.3)
        return real(self, data, *args)
    monkeypatch.setattr(socket.socket, "sendall", slow_ack)
    master = TCPStore("127.0.0.1", 0, 2, is_master=True, timeout=10)
    client = TCPStore("127.0.0.1", master.port, 2, is_master=False, timeout=10, rank=1)

    def wait_then_close():
        master.get("ack")
        master.close(grace=0.0)
    closer = threading.Thread(target=wait_then_close)
    closer.start()
    time.sleep(0.1)
    client.set("ack", b"1")          # raised StoreError before the fix
    closer.join(10)
    assert not closer.is_alive()
    client.close()
