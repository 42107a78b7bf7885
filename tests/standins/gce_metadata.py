"""A stand-in for GCE's metadata server, serving the one key the trainer watches.

As GCE documents it (https://cloud.google.com/compute/docs/metadata/querying-metadata):
a request needs the header ``Metadata-Flavor: Google`` (else 403) and the answer
carries it too; ``?wait_for_change=true`` holds the request until the value changes
from the one whose ``ETag`` is given as ``last_etag`` (or, without it, until the next
change), or ``timeout_sec`` passes; the value comes with its ``ETag``. The key
``instance/preempted`` reads ``FALSE`` until the VM is preempted, then ``TRUE``.
``hang`` holds every request open (a slow server); ``flavor=False`` answers without
the header (something that is not GCE's server); ``drop_first_wait`` closes the first
waiting request's connection without an answer (a dropped connection). ``fail_first``
answers that many first requests with ``failure`` instead: ``"503"`` (an HTTP 503 with
GCE's header), ``"reset"`` (a TCP reset, no answer), ``"garbage"`` (bytes that are not
HTTP) or ``"not a value"`` (a 200 whose body is neither ``TRUE`` nor ``FALSE``).
:meth:`revert` turns the key back to ``FALSE`` (a notice taken back).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

KEY = "/computeMetadata/v1/instance/preempted"


class MetadataServer:
    FAILURES = ("503", "reset", "garbage", "not a value")

    def __init__(
        self,
        preempted=False,
        hang=False,
        flavor=True,
        drop_first_wait=False,
        fail_first=0,
        failure="503",
    ):
        assert failure in self.FAILURES, failure
        self.value = "TRUE" if preempted else "FALSE"
        self.hang, self.flavor, self.drop_first_wait = hang, flavor, drop_first_wait
        self.fail_first, self.failure = fail_first, failure
        self.changed = threading.Condition()
        self.requests: list[tuple[float, str]] = []
        self.flipped_at: float | None = None
        handler = type("Handler", (_Handler,), {"md": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def host(self) -> str:
        """``GCE_METADATA_HOST``'s value for this server."""
        return f"127.0.0.1:{self.server.server_address[1]}"

    def etag(self) -> str:
        return f"etag-{self.value}"

    def preempt(self) -> float:
        """Turns the key TRUE; returns when (epoch seconds)."""
        with self.changed:
            self.value = "TRUE"
            self.flipped_at = time.time()
            self.changed.notify_all()
        return self.flipped_at

    def revert(self) -> float:
        """Turns the key back to FALSE; returns when (epoch seconds)."""
        with self.changed:
            self.value = "FALSE"
            self.changed.notify_all()
        return time.time()

    def close(self) -> None:
        with self.changed:
            self.hang = False
            self.changed.notify_all()
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    md: MetadataServer
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 - http.server's name
        md = self.md
        md.requests.append((time.time(), self.path))
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if self.headers.get("Metadata-Flavor") != "Google":
            return self._send(403, "Missing Metadata-Flavor:Google header.")
        if url.path != KEY:
            return self._send(404, "not found")
        if md.fail_first > 0:
            md.fail_first -= 1
            return self._fail(md.failure)
        if query.get("wait_for_change") == "true" and md.drop_first_wait:
            md.drop_first_wait = False
            self.close_connection = True
            return
        with md.changed:
            if md.hang:
                md.changed.wait_for(lambda: not md.hang)
            if query.get("wait_for_change") == "true":
                seen = query.get("last_etag") or md.etag()
                md.changed.wait_for(
                    lambda: md.etag() != seen, timeout=float(query.get("timeout_sec", 300))
                )
            value, etag = md.value, md.etag()
        self._send(200, value, etag)

    def _send(self, status: int, body: str, etag: str = "") -> None:
        raw = body.encode()
        self.send_response(status)
        if self.md.flavor:
            self.send_header("Metadata-Flavor", "Google")
        if etag:
            self.send_header("ETag", etag)
        self.send_header("Content-Type", "application/text")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        try:
            self.wfile.write(raw)
        except BrokenPipeError:  # the client went away (its process ended): as GCE's would
            self.close_connection = True

    def _fail(self, failure: str) -> None:
        if failure == "503":
            return self._send(503, "Service Unavailable")
        if failure == "not a value":
            return self._send(200, "<!doctype html><title>oops</title>", "etag-html")
        self.close_connection = True
        if failure == "garbage":
            self.wfile.write(b"\x00\x17garbage, not HTTP\r\n\r\n")
            return None
        # SO_LINGER 0: close() sends a RST, not a FIN (socket(7)).
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        return None

    def log_message(self, *args):
        pass
