"""Progress display: a terminal bar, a log line every few seconds, or nothing."""

from __future__ import annotations

import logging
import sys
import threading
import time

from spottrain.gcs_copy.results import _human

# One logger for the whole package, named after it, so that configuring
# ``spottrain.gcs_copy`` covers every module.
log = logging.getLogger(__package__)


class _Progress:
    """A terminal progress bar, periodic log lines, or nothing."""

    def __init__(self, files: int, nbytes: int, mode: str, log_every: float = 10.0):
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "log"
        self.mode = mode if files else "off"
        self.files, self.nbytes = files, nbytes
        self.done_files = self.done_bytes = 0
        self._start = time.monotonic()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._every = 0.2 if self.mode == "bar" else log_every
        self._thread = None
        if self.mode != "off":
            self._thread = threading.Thread(target=self._loop, name="copy-progress", daemon=True)
            self._thread.start()

    def advance(self, nbytes: int) -> None:
        with self._lock:
            self.done_files += 1
            self.done_bytes += nbytes

    def _line(self) -> tuple[str, float]:
        elapsed = max(time.monotonic() - self._start, 1e-9)
        with self._lock:
            files, done = self.done_files, self.done_bytes
        frac = done / self.nbytes if self.nbytes else files / self.files
        return (
            f"{frac:4.0%} {files}/{self.files} files, {_human(done)}/{_human(self.nbytes)}, "
            f"{_human(done / elapsed)}/s",
            frac,
        )

    def _draw(self, final: bool = False) -> None:
        text, frac = self._line()
        if self.mode == "bar":
            width = 30
            filled = int(width * frac)
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {text}\x1b[K")
            if final:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif not final:
            log.info("progress: %s", text)

    def _loop(self) -> None:
        while not self._closed.wait(self._every):
            self._draw()

    def close(self) -> None:
        if self._thread is None:
            return
        self._closed.set()
        self._thread.join()
        self._draw(final=True)
