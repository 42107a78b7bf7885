"""The copier tests' trees, their expected state, and a fault-injecting proxy before GCS."""

from __future__ import annotations

import base64
import http.client
import http.server
import socket
import struct
import threading
from pathlib import Path

import google_crc32c
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage


def crc(data: bytes) -> str:
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def upload_tree(bucket: storage.Bucket, prefix: str, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        bucket.blob(prefix + rel).upload_from_string(data)


def local_state(root: Path) -> dict[str, str]:
    """Relative name -> CRC32C of every file under root (temp files included)."""
    return {
        p.relative_to(root).as_posix(): crc(p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def expected(files: dict[str, bytes]) -> dict[str, str]:
    return {rel: crc(data) for rel, data in files.items()}


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob(".spottrain-*.part")]


class FaultProxy:
    """A plain HTTP proxy to fake-gcs-server that misbehaves on matching requests.

    ``add(match, action, times)``: for the next ``times`` requests where
    ``match(method, path)`` holds, do ``action``: an HTTP status (int) instead of
    forwarding, ``"reset"`` (TCP RST, no response), ``"corrupt"`` (flip a byte of
    the response body), ``"corrupt-upload"`` (flip a byte of the request body),
    ``"lose-response"`` (forward, then answer 503), or a callable run before
    forwarding.
    """

    def __init__(self, upstream: str):
        self.upstream = upstream.removeprefix("http://")
        self.rules: list[list] = []
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def handle_one(self):
                proxy.forward(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = handle_one

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # "reset" leaves sockets that fail on flush; that is the point

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def add(self, match, action, times: int = 1) -> None:
        with self._lock:
            self.rules.append([match, action, times])

    def _action(self, method: str, path: str):
        with self._lock:
            self.requests.append((method, path))
            for rule in self.rules:
                if rule[2] > 0 and rule[0](method, path):
                    rule[2] -= 1
                    return rule[1]
        return None

    def client(self) -> storage.Client:
        return storage.Client(
            project="test",
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.url},
        )

    def forward(self, h: http.server.BaseHTTPRequestHandler) -> None:
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        action = self._action(h.command, h.path)
        if isinstance(action, int):
            payload = b'{"error": {"code": %d, "message": "injected"}}' % action
            h.send_response(action)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            h.wfile.write(payload)
            return
        if action == "reset":
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.close_connection = True
            h.connection.close()
            return
        if callable(action):
            action()
        if action == "corrupt-upload":
            marker = body.find(b"AAAA")
            body = body[:marker] + b"AAAB" + body[marker + 4 :]
        conn = http.client.HTTPConnection(self.upstream, timeout=30)
        headers = {
            k: v for k, v in h.headers.items() if k.lower() not in ("host", "content-length")
        }
        conn.request(h.command, h.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        status = resp.status
        if action == "corrupt" and data:
            data = data[:-1] + bytes([data[-1] ^ 0xFF])
        if action == "lose-response":
            status, data = 503, b'{"error": {"code": 503, "message": "injected after write"}}'
        h.send_response(status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def is_download(name: str):
    quoted = name.replace("/", "%2F")
    return lambda method, path: method == "GET" and path.startswith("/download/") and quoted in path
