"""A small TCP key-value store for rendezvous (``MASTER_ADDR:MASTER_PORT``).

Used where ranks started by something other than ``mpirun`` (``torchrun``
style: ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``) must agree
on a few bytes before the communication engine takes over — the NCCL unique
id that rank 0 draws and every rank passes to ``ncclCommInitRank``. It is a
rendezvous, not a transport: it carries a handful of small values once, and
every tensor still moves through the engine (NCCL, MPI).

Rank 0 (``is_master=True``) serves the store from a daemon thread on
``host:port``; every rank (rank 0 included) is a client. ``get`` blocks until
the key is set. Every operation is bounded by the store's timeout and fails
with :class:`StoreError` naming the address, the rank, the key and what
happened — a server that never comes up, a peer that never sets a key, a
connection that breaks — never a hang.

Example (each rank)::

    store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                     world_size, is_master=(rank == 0), timeout=60)
    uid = exchange_bytes(store, "nccl/0", rank, uid if rank == 0 else None)
    store.close()

Wire format (one request and one reply per call, on one connection per
client): a request is an op byte (``S`` set, ``G`` get, ``A`` add, ``C``
check), a 4-byte key length, the UTF-8 key, an 8-byte value length and the
value (``A``: an 8-byte signed increment; ``C``: empty); the reply to ``S``
is ``K``, to ``G`` an 8-byte length and the value, to ``A`` the new 8-byte
value, to ``C`` ``1`` if the key is set and ``0`` if not (without waiting).
Integers are big-endian.

``dragon_core.distributed.init_process_group`` builds on it for environment
rendezvous (``init_method="env://"``, ``"tcp://host:port"``, ``store=``):
see ``_rendezvous.py``.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

__all__ = ["TCPStore", "StoreError", "exchange_bytes"]

#: Largest value the store accepts (it is for ids and addresses, not data).
MAX_VALUE_BYTES = 1 << 20


class StoreError(RuntimeError):
    """A store operation failed or timed out (the message names the store's
    address, this rank, the key and the cause)."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the peer")
        buf += chunk
    return bytes(buf)


# How long close() waits, at most, for the replies owed to sets and adds.
_OWED_REPLY_S = 5.0


class _Server:
    """The store's server: a listening socket and a thread per client."""

    def __init__(self, host: str, port: int):
        self.data: dict[str, bytes] = {}
        self.cond = threading.Condition()
        self.closed = False
        self.owed = 0          # visible sets/adds whose reply is not sent yet
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.clients: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self.thread = threading.Thread(target=self._accept, name="dragon-store-server",
                                       daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return                                  # closed
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.cond:
                if self.closed:
                    conn.close()
                    return
                self.clients.append(conn)
            t = threading.Thread(target=self._serve, args=(conn,), name="dragon-store-client",
                                 daemon=True)
            t.start()
            self.threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                try:
                    op = conn.recv(1)
                except OSError:
                    return
                if not op:
                    return
                (klen,) = struct.unpack(">I", _recv_exact(conn, 4))
                key = _recv_exact(conn, klen).decode()
                (vlen,) = struct.unpack(">Q", _recv_exact(conn, 8))
                if vlen > MAX_VALUE_BYTES:
                    return                              # a bad client: drop it
                value = _recv_exact(conn, vlen)
                if op == b"S":
                    # Visible to every client before the reply (a set that
                    # returned is seen by all), and the reply is owed: a
                    # rank that sees the key may close the store at once
                    # (exchange_bytes' rank 0 after the last reader's ack),
                    # and close() sends owed replies before it shuts sockets.
                    with self.cond:
                        self.data[key] = value
                        self.owed += 1
                        self.cond.notify_all()
                    self._reply(conn, b"K")
                elif op == b"A":
                    (inc,) = struct.unpack(">q", value)
                    with self.cond:
                        old = struct.unpack(">q", self.data.get(key, b"\0" * 8))[0]
                        self.data[key] = struct.pack(">q", old + inc)
                        self.owed += 1
                        self.cond.notify_all()
                        new = old + inc
                    self._reply(conn, struct.pack(">q", new))
                elif op == b"C":
                    with self.cond:
                        present = key in self.data
                    conn.sendall(b"1" if present else b"0")
                elif op == b"G":
                    with self.cond:
                        # The client bounds the wait (its socket timeout);
                        # the server waits until the key is set or it closes.
                        while key not in self.data and not self.closed:
                            self.cond.wait(1.0)
                        if key not in self.data:        # closed while waiting
                            return
                        out = self.data[key]
                    conn.sendall(struct.pack(">Q", len(out)) + out)
                else:
                    return
        except (OSError, ConnectionError, struct.error, UnicodeDecodeError):
            return
        finally:
            conn.close()

    def _reply(self, conn: socket.socket, data: bytes) -> None:
        """Send the reply a mutation owes (its effect is already visible)."""
        try:
            conn.sendall(data)
        finally:
            with self.cond:
                self.owed -= 1
                self.cond.notify_all()

    def stop_listening(self) -> None:
        """Accept no new client (the connected ones are still served). On
        Linux a thread blocked in ``accept`` keeps the port bound after a
        plain ``close``; ``shutdown`` wakes it, so the port is free again
        (a later store may listen on it) once this returns."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        self.thread.join(5.0)

    def close(self, grace: float) -> None:
        """Stop serving. Replies already owed are still sent: each client's
        thread gets up to ``grace`` seconds to finish (a client that reads
        its last reply and disconnects ends it) before its socket is shut."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.stop_listening()
        # Replies owed for sets and adds that are already visible go out
        # whatever the grace (a closer that saw a key must not cut its
        # setter off); bounded, in case a client stopped reading.
        owed_deadline = time.monotonic() + max(grace, _OWED_REPLY_S)
        with self.cond:
            while self.owed > 0 and time.monotonic() < owed_deadline:
                self.cond.wait(owed_deadline - time.monotonic())
        deadline = time.monotonic() + grace
        for t in list(self.threads):
            t.join(max(0.0, deadline - time.monotonic()))
        with self.cond:
            clients, self.clients = self.clients, []
        for c in clients:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class TCPStore:
    """A key-value store served by rank 0 at ``host:port`` (see the module
    docstring).

    Parameters
    ----------
    host : str
        ``MASTER_ADDR``: the address rank 0 listens on and the others
        connect to.
    port : int
        ``MASTER_PORT``. With ``is_master`` and port 0 the server takes a
        free port (``store.port`` tells which).
    world_size : int
        Number of ranks (recorded; checked to be >= 1).
    is_master : bool
        Whether this process serves the store (rank 0).
    timeout : float
        Seconds any one operation (connecting included) may take.
    rank : int, optional
        This process's rank, for error messages.

    Raises
    ------
    StoreError
        If the server cannot listen on ``host:port`` (e.g. the port is in
        use) or the client cannot connect within ``timeout``.
    """

    def __init__(self, host: str, port: int, world_size: int, is_master: bool,
                 timeout: float = 300.0, rank: int | None = None):
        if not (isinstance(world_size, int) and world_size >= 1):
            raise ValueError(f"TCPStore: world_size must be an int >= 1, got {world_size!r}")
        if not timeout > 0:
            raise ValueError(f"TCPStore: timeout must be > 0 seconds, got {timeout!r}")
        port = int(port)
        if not 0 <= port <= 65535 or (port == 0 and not is_master):
            raise ValueError(f"TCPStore: port must be in [1, 65535], got {port}")
        self.host, self.world_size, self.timeout = str(host), world_size, float(timeout)
        self.rank = 0 if rank is None and is_master else rank
        self._server = None
        self._lock = threading.Lock()
        if is_master:
            try:
                self._server = _Server(self.host, port)
            except OSError as e:
                raise StoreError(f"{self._who()}: cannot serve the store on {self.host}:{port} "
                                 f"({e}); is MASTER_PORT free on MASTER_ADDR?") from None
            port = self._server.port
        self.port = port
        self._sock = self._connect()
        # One round trip: the server has accepted this connection and serves
        # it, so a close() that begins later (it stops accepting at once)
        # still answers this client during its grace.
        self._request(b"C", "\0connected", b"", "connect")

    def _who(self) -> str:
        r = "" if self.rank is None else f"rank {self.rank}"
        return f"TCPStore {r}".rstrip()

    def _where(self) -> str:
        return f"{self.host}:{self.port}"

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + self.timeout
        delay, last = 0.01, None
        while True:
            try:
                s = socket.create_connection(
                    (self.host, self.port),
                    timeout=max(0.01, min(5.0, deadline - time.monotonic())))
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return s
            except OSError as e:   # the server may not be up yet: retry
                last = e
            if time.monotonic() + delay > deadline:
                raise StoreError(
                    f"{self._who()}: could not connect to the store at {self._where()} "
                    f"within {self.timeout:g} s ({last}); is rank 0 running and are "
                    "MASTER_ADDR/MASTER_PORT the same on every rank?")
            time.sleep(delay)
            delay = min(0.5, delay * 2)

    def _request(self, op: bytes, key: str, value: bytes, what: str) -> bytes:
        sock = self._sock          # close() from another thread may clear it
        if sock is None:
            raise StoreError(f"{self._who()}: {what}({key!r}) on a closed store")
        if len(value) > MAX_VALUE_BYTES:
            raise ValueError(f"TCPStore.{what}: value of {len(value)} bytes for key {key!r}; "
                             f"the store takes at most {MAX_VALUE_BYTES} (it is a "
                             "rendezvous, not a transport)")
        k = key.encode()
        with self._lock:
            try:
                # an infinite (or huge: past time_t) timeout blocks without one
                sock.settimeout(self.timeout if self.timeout < 1e9 else None)
                sock.sendall(op + struct.pack(">I", len(k)) + k +
                                   struct.pack(">Q", len(value)) + value)
                if op == b"S":
                    if _recv_exact(sock, 1) != b"K":
                        raise ConnectionError("bad reply")
                    return b""
                if op == b"A":
                    return _recv_exact(sock, 8)
                if op == b"C":
                    return _recv_exact(sock, 1)
                (n,) = struct.unpack(">Q", _recv_exact(sock, 8))
                return _recv_exact(sock, n)
            except socket.timeout:
                self._drop()
                raise StoreError(
                    f"{self._who()}: {what}({key!r}) on the store at {self._where()} did not "
                    f"complete within {self.timeout:g} s (a rank that should set it died, "
                    "stopped answering, or never started)") from None
            except (OSError, ConnectionError) as e:
                self._drop()
                raise StoreError(f"{self._who()}: {what}({key!r}) on the store at "
                                 f"{self._where()} failed: {e} (did rank 0 exit?)") from None

    def _drop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def set(self, key: str, value: bytes) -> None:
        """Set ``key`` to ``value`` (bytes, at most 1 MiB)."""
        self._request(b"S", key, bytes(value), "set")

    def get(self, key: str) -> bytes:
        """The value of ``key``, waiting (up to the timeout) until a rank sets it."""
        return self._request(b"G", key, b"", "get")

    def add(self, key: str, amount: int = 1) -> int:
        """Add ``amount`` to the integer counter ``key`` (0 if unset); returns
        the new value."""
        return struct.unpack(">q", self._request(b"A", key, struct.pack(">q", int(amount)),
                                                 "add"))[0]

    def check(self, key: str) -> bool:
        """Whether ``key`` is set (never waits)."""
        return self._request(b"C", key, b"", "check") == b"1"

    def close(self, grace: float | None = None) -> None:
        """Close this client, and on rank 0 stop serving (after the other
        ranks disconnect, or at most ``grace`` seconds, default
        ``min(timeout, 10)``)."""
        if self._sock is not None:
            self._drop()
        if self._server is not None:
            self._server.close(min(self.timeout, 10.0) if grace is None else float(grace))
            self._server = None

    def __enter__(self) -> "TCPStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def exchange_bytes(store: TCPStore, key: str, rank: int, value: bytes | None,
                   size: int | None = None, check=None) -> bytes:
    """Rank 0 publishes ``value`` under ``key``; every rank returns it.

    ``rank`` and ``size`` (default ``store.world_size``) are this process's
    rank and the number of ranks taking part (a process group's, for a
    group's NCCL id). Rank 0 also waits until every other rank has read it
    (so it may close the store afterwards without cutting a slow reader
    off). This is how the NCCL unique id reaches the ranks under environment
    rendezvous. ``check`` (optional) is called with the value a reader got
    before it counts as having read it: a reader whose check raises is not
    counted, so rank 0 keeps waiting for it (and times out) instead of going
    on with a partner that will not join.
    """
    n = store.world_size if size is None else int(size)
    if rank == 0:
        if value is None:
            raise ValueError("exchange_bytes: rank 0 must give the value")
        store.set(key, bytes(value))
        if n > 1:
            store.get(f"{key}/read/{n - 1}")
        return bytes(value)
    out = store.get(key)
    if check is not None:
        check(out)
    if store.add(f"{key}/readers", 1) == n - 1:
        store.set(f"{key}/read/{n - 1}", b"1")
    return out
