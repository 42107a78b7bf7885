"""A TCP proxy in front of a real server that fails the way a network does (tests only).

The client under test (the real ``kubernetes`` client and urllib3) talks to the proxy's
port; the proxy forwards bytes (TLS passes through untouched) until the test switches
it to an outage:

- ``refuse``: nothing listens on the port (connect: ECONNREFUSED); live connections
  are reset. The port stays held by a bound socket that does not listen
  (``SO_REUSEPORT``), so no other process can take it meanwhile.
- ``reset``: connections are accepted, then reset (RST: ``SO_LINGER`` 0); live ones too.
- ``blackhole``: connections are accepted, nothing is forwarded or answered; live ones
  go silent. They are closed when the outage ends (the client gave up on them).
- ``slow``: forwarded, each chunk toward the client ``delay`` seconds late.

``accepted`` counts connections, so a test can tell the client kept trying.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time

PASS, REFUSE, RESET, BLACKHOLE, SLOW = "pass", "refuse", "reset", "blackhole", "slow"
KINDS = (REFUSE, RESET, BLACKHOLE, SLOW)


def _reuse_port_socket() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    return sock


def _reset(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass


class WireProxy:
    """Forwards 127.0.0.1:``port`` to ``target`` (host, port), failing on demand."""

    def __init__(self, target: tuple[str, int], delay: float = 3.0):
        self.target = target
        self.delay = delay
        self.mode = PASS
        self.accepted = 0
        self._lock = threading.Lock()
        self._conns: list[tuple[socket.socket, socket.socket | None]] = []
        self._listener = _reuse_port_socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._holder: socket.socket | None = None
        self._closed = threading.Event()
        threading.Thread(target=self._accept_loop, daemon=True, name="wire-accept").start()

    def set(self, mode: str) -> None:
        """Switches to ``mode``; what the connections already open suffer is in the docs."""
        with self._lock:
            before, self.mode = self.mode, mode
            if mode == REFUSE and self._holder is None:
                self._holder = _reuse_port_socket()
                self._holder.bind(("127.0.0.1", self.port))
                self._listener.close()
                self._listener = None
            elif mode != REFUSE and self._holder is not None:
                self._listener = _reuse_port_socket()
                self._listener.bind(("127.0.0.1", self.port))
                self._listener.listen(64)
                self._holder.close()
                self._holder = None
            if mode in (REFUSE, RESET) or (before == BLACKHOLE and mode != BLACKHOLE):
                conns, self._conns = self._conns, []
            else:
                conns = []
        for client, upstream in conns:
            _reset(client)
            if upstream is not None:
                upstream.close()

    def close(self) -> None:
        self._closed.set()
        self.set(PASS)
        with self._lock:
            self._listener.close()
            conns, self._conns = self._conns, []
        for client, upstream in conns:
            client.close()
            if upstream is not None:
                upstream.close()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                listener = self._listener
            if listener is None:
                time.sleep(0.05)
                continue
            try:
                ready, _, _ = select.select([listener], [], [], 0.1)
                if not ready:
                    continue
                client, _ = listener.accept()
            except (OSError, ValueError):
                continue  # swapped or closed meanwhile
            self.accepted += 1
            mode = self.mode
            if mode == RESET:
                _reset(client)
                continue
            if mode == BLACKHOLE:
                with self._lock:
                    self._conns.append((client, None))
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._conns.append((client, upstream))
            for src, dst, late in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(
                    target=self._pump, args=(src, dst, late), daemon=True, name="wire-pump"
                ).start()

    def _pump(self, src: socket.socket, dst: socket.socket, toward_client: bool) -> None:
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                while self.mode == BLACKHOLE:  # silent: nothing goes through
                    time.sleep(0.05)
                if toward_client and self.mode == SLOW:
                    time.sleep(self.delay)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def api_client_via(admin, proxy: WireProxy):
    """A ``kubernetes.client.ApiClient`` like ``admin`` whose requests go through ``proxy``."""
    import copy

    from spottrain.runtime.train_job import kube

    conf = copy.deepcopy(admin.configuration)
    conf.host = f"https://127.0.0.1:{proxy.port}"
    return kube.api_client(conf)  # as in_cluster() makes it
