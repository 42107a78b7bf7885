"""The trainer's stdout and stderr survive their reader's death, from every thread."""

from __future__ import annotations

import os
import threading

from spottrain.trainer.stdio import SurvivingStream

WRITERS = 4
TRIALS = 100


def _write_together(stream: SurvivingStream) -> list[BaseException]:
    """Four threads write at once, as the step line's print and a saver's log line do."""
    errors: list[BaseException] = []
    start = threading.Barrier(WRITERS)

    def write() -> None:
        start.wait()
        try:
            for _ in range(20):
                stream.write("step line\n")
                stream.flush()
        except OSError as e:
            errors.append(e)

    threads = [threading.Thread(target=write) for _ in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_threads_that_hit_the_dead_pipe_together_all_go_on_to_dev_null():
    """The second thread to hit EPIPE waits for the first one's switch, then retries.

    Before the switch was locked, a thread that hit EPIPE after the first had set
    ``reader_lost`` but before its dup2 raised BrokenPipeError (in more than half of
    these trials): on KFP, a step line printed as the launcher died exited 1.
    """
    failed = 0
    for _ in range(TRIALS):
        read_fd, write_fd = os.pipe()
        os.close(read_fd)  # the launcher, gone
        with os.fdopen(write_fd, "w", buffering=1) as f:
            stream = SurvivingStream(f)
            errors = _write_together(stream)
            assert stream.reader_lost
        failed += bool(errors)
    assert failed == 0, f"{failed} of {TRIALS} trials let a BrokenPipeError out"
