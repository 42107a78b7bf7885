"""Progress display: a tqdm bar on a terminal, a log line every few seconds, or nothing."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

from spottrain.copier.results import _human

# One logger for the whole package, named after it, so that configuring
# ``spottrain.copier`` covers every module.
log = logging.getLogger(__package__)


class _Progress:
    """A tqdm bar (``"bar"``), periodic log lines (``"log"``), or nothing.

    The log mode is ours because tqdm writes carriage-return redraws, which a
    non-terminal log (a KFP pod's, a file) keeps as one ever-growing line.
    """

    def __init__(self, files: int, nbytes: int, mode: str, log_every: float = 10.0):
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "log"
        self.mode = mode if files else "off"
        self.files, self.nbytes = files, nbytes
        self.done_files = self.done_bytes = 0
        self._start = time.monotonic()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = None
        self._bar = None
        if self.mode == "bar":
            from tqdm import tqdm

            try:
                sized = os.get_terminal_size(sys.stderr.fileno()).columns > 0
            except OSError:
                sized = False
            # Bytes when there are any, else files (a tree of empty files). A
            # terminal that reports no size (a fresh pty) would get no bar at all:
            # tqdm reads its size as -1 rows and hides every bar.
            self._bar = tqdm(
                total=nbytes or files,
                unit="B" if nbytes else "file",
                unit_scale=True,
                unit_divisor=1000,
                file=sys.stderr,
                mininterval=0.2,
                dynamic_ncols=sized,
                ncols=None if sized else 100,
                nrows=None if sized else 20,
                postfix=f"0/{files} files",
            )
        elif self.mode == "log":
            self._thread = threading.Thread(
                target=self._loop, args=(log_every,), name="copy-progress", daemon=True
            )
            self._thread.start()

    def advance(self, nbytes: int) -> None:
        with self._lock:
            self.done_files += 1
            self.done_bytes += nbytes
            if self._bar is not None:
                self._bar.set_postfix_str(f"{self.done_files}/{self.files} files", refresh=False)
                self._bar.update(nbytes if self.nbytes else 1)

    def _line(self) -> str:
        elapsed = max(time.monotonic() - self._start, 1e-9)
        with self._lock:
            files, done = self.done_files, self.done_bytes
        frac = done / self.nbytes if self.nbytes else files / self.files
        return (
            f"{frac:4.0%} {files}/{self.files} files, {_human(done)}/{_human(self.nbytes)}, "
            f"{_human(done / elapsed)}/s"
        )

    def _loop(self, every: float) -> None:
        while not self._closed.wait(every):
            log.info("progress: %s", self._line())

    def close(self) -> None:
        if self._bar is not None:
            with self._lock:
                self._bar.close()
        if self._thread is not None:
            self._closed.set()
            self._thread.join()
