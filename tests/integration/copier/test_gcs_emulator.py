"""spottrain.testing.gcs_emulator: the fake-gcs-server helper the copy tests, bench and demo use."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from spottrain.testing.gcs_emulator import FakeGcs


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purpose.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_context_manager_serves_sets_env_and_stops(monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://previous:1")
    with FakeGcs() as gcs:
        assert os.environ["STORAGE_EMULATOR_HOST"] == gcs.host == f"http://127.0.0.1:{gcs.port}"
        bucket = gcs.create_bucket("emulator-test")
        bucket.blob("a/b.txt").upload_from_string(b"payload")
        assert [b.name for b in gcs.new_client().list_blobs("emulator-test")] == ["a/b.txt"]
        pid = gcs._proc.pid
        assert _alive(pid)
    assert not gcs.running
    assert not _alive(pid)
    assert os.environ["STORAGE_EMULATOR_HOST"] == "http://previous:1"
    gcs.stop()  # idempotent


def test_two_servers_are_independent():
    with FakeGcs(set_env=False) as one, FakeGcs(set_env=False) as two:
        assert one.port != two.port
        one.create_bucket("only-in-one")
        assert [b.name for b in two.client.list_buckets()] == []


def test_server_dies_with_its_parent():
    """No orphan: SIGKILL the Python process that started it, the server goes too."""
    script = (
        "from spottrain.testing.gcs_emulator import FakeGcs\n"
        "import time\n"
        "g = FakeGcs().start()\n"
        "print(g._proc.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    server_pid = int(parent.stdout.readline())
    assert _alive(server_pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while _alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(server_pid)


def test_a_port_taken_by_another_server_is_not_taken_for_ours(monkeypatch):
    """The port it picked is taken, between pick and bind, by another server that
    answers the readiness check as fake-gcs-server does (issue 42): it must start on a
    fresh port, not hand out a client of the other one."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from spottrain.testing import gcs_emulator

    class Impostor(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = b'{"kind": "storage#buckets"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    other = ThreadingHTTPServer(("127.0.0.1", 0), Impostor)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    picks = [[other.server_address[1]]]
    pick = gcs_emulator.free_ports
    monkeypatch.setattr(gcs_emulator, "free_ports", lambda n: picks.pop() if picks else pick(n))
    try:
        with FakeGcs(set_env=False) as gcs:
            assert gcs.port != other.server_address[1]
            gcs.create_bucket("ours")  # the impostor answers no POST
            assert [b.name for b in gcs.client.list_buckets()] == ["ours"]
    finally:
        other.shutdown()
        other.server_close()
