"""Standard output that cannot kill the trainer when its reader dies.

On KFP-on-Argo the task's stdout and stderr are pipes owned by KFP's launcher
(it copies them to the pod log and to the log artifact it publishes). On a
preemption the launcher is the first process to die, so the next ``print`` of a
step line would raise ``BrokenPipeError`` (Python ignores SIGPIPE and turns
EPIPE into an exception) and the trainer would die in the middle of the save
the notice was meant for. :func:`survive_broken_pipes` makes every later write
go to ``/dev/null`` instead: the log reader is gone, the training is not.
"""

from __future__ import annotations

import errno
import io
import os
import sys
import threading

# EPIPE: the reader closed the pipe; EIO: the terminal or pty went away.
_DEAD_READER = (errno.EPIPE, errno.EIO)


class SurvivingStream(io.TextIOBase):
    """Wraps a text stream; once its reader is gone, writes go to ``/dev/null``."""

    def __init__(self, stream):
        super().__init__()
        self._stream = stream
        self.reader_lost = False
        # Threads that hit the dead pipe together (the step line's print, a saver's
        # log line) each retry only after the first has pointed the fd at /dev/null.
        self._switch = threading.Lock()

    def _to_devnull(self) -> None:
        # Point the file descriptor itself at /dev/null, so C++ writers (TF's logs)
        # and the Python buffer still holding the failed bytes both drain there.
        self.reader_lost = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def _guarded(self, call, *args):
        try:
            return call(*args)
        except OSError as e:
            if e.errno not in _DEAD_READER:
                raise
            with self._switch:
                if not self.reader_lost:
                    self._to_devnull()
            return call(*args)  # to /dev/null now: a second failure is a real one

    def write(self, text: str) -> int:
        """Writes ``text``; after the reader is gone, to /dev/null."""
        self._guarded(self._stream.write, text)
        return len(text)

    def flush(self) -> None:
        """Flushes; after the reader is gone, to /dev/null."""
        self._guarded(self._stream.flush)

    def fileno(self) -> int:
        """The wrapped stream's file descriptor."""
        return self._stream.fileno()

    def isatty(self) -> bool:
        """Whether the wrapped stream is a terminal."""
        return self._stream.isatty()

    def writable(self) -> bool:
        """Always writable."""
        return True

    @property
    def encoding(self):
        """The wrapped stream's encoding."""
        return self._stream.encoding

    @property
    def errors(self):
        """The wrapped stream's error handler."""
        return self._stream.errors

    @property
    def buffer(self):
        """The wrapped stream's binary buffer."""
        return self._stream.buffer


def survive_broken_pipes() -> None:
    """Wraps ``sys.stdout`` and ``sys.stderr`` (idempotent; call before logging is set up)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, SurvivingStream):
            continue
        try:
            stream.fileno()
        except (OSError, ValueError, AttributeError):  # pytest capture, StringIO: no fd
            continue
        setattr(sys, name, SurvivingStream(stream))
