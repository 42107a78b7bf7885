"""bench/latency_proxy.py really adds the round trip it is given (what bench/copy.py relies on)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

PROXY = Path(__file__).resolve().parents[3] / "bench" / "latency_proxy.py"


@pytest.fixture()
def echo_server():
    """A TCP server that echoes every chunk back at once (~0 ms round trip)."""
    server = socket.create_server(("127.0.0.1", 0))

    def handle(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


@pytest.fixture()
def proxy(echo_server):
    proc = subprocess.Popen(
        [sys.executable, str(PROXY), "--upstream", f"127.0.0.1:{echo_server}"]
        + ["--rtt-ms", "80", "--handshake-rtts", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert line.startswith("listening "), line
    yield proc, int(line.split()[1])
    proc.stdin.close()  # closing stdin ends the proxy
    assert proc.wait(timeout=10) == 0


def round_trips(port: int, n: int) -> tuple[float, list[float]]:
    """(first round trip incl. connection setup, the next n round trips) in seconds."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        times = []
        for i in range(n + 1):
            start = time.perf_counter()
            sock.sendall(b"ping %d" % i)
            assert sock.recv(100) == b"ping %d" % i
            times.append(time.perf_counter() - start)
    return times[0], times[1:]


def test_proxy_adds_the_configured_round_trip_and_handshake(proxy):
    proc, port = proxy
    first, rest = round_trips(port, 3)
    # 80 ms each round trip; the first also waits one handshake RTT.
    assert all(0.080 <= t < 0.080 + 0.25 for t in rest), rest
    assert 0.160 <= first < 0.160 + 0.25, first


def test_proxy_rtt_changes_on_stdin_and_zero_adds_nothing(proxy):
    proc, port = proxy
    proc.stdin.write("0\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "rtt 0"
    first, rest = round_trips(port, 3)
    assert first < 0.05 and max(rest) < 0.05, (first, rest)
    proc.stdin.write("30\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "rtt 30"
    _, rest = round_trips(port, 3)
    assert all(t >= 0.030 for t in rest), rest


def test_chunks_are_delayed_not_throttled(proxy):
    """A stream of chunks overlaps: 20 chunks cost about one round trip, not 20."""
    proc, port = proxy
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"warm")
        assert sock.recv(100) == b"warm"
        start = time.perf_counter()
        for _ in range(20):
            sock.sendall(b"x" * 1000)
            time.sleep(0.002)
        got = 0
        while got < 20_000:
            got += len(sock.recv(65536))
        elapsed = time.perf_counter() - start
    assert 0.080 <= elapsed < 0.080 + 0.040 + 0.25, elapsed
