"""Entry point: ``python -m spottrain.trainer.task [flags]`` (``--help`` lists them).

Runs one attempt of a (possibly multi-worker) training run and exits with the
code documented in :mod:`spottrain.trainer.preemption`. By default this process is a
light supervisor (no TensorFlow) that runs the trainer as its child and
watches it for hangs (see :mod:`spottrain.trainer.watchdog`); signals are forwarded.
It can be a container's main process (PID 1, as in the JobSet's pods): it
handles SIGTERM/SIGINT from its first lines on, reaps orphans and exits with
the trainer's code.
"""

from __future__ import annotations

import logging
import os
import sys


def main(argv: list[str] | None = None) -> int:
    """Runs the trainer (supervised unless ``--no-supervisor``); returns its exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    from spottrain.trainer import watchdog

    relay = stop = None
    if not watchdog.should_supervise(argv):
        # The trainer: it takes the notice from its first lines, before TensorFlow
        # starts a thread, in every phase of the attempt (preemption.StopFlag.install).
        from spottrain.trainer.preemption import StopFlag

        stop = StopFlag()
        stop.install(first=True)
    else:
        # First thing: as a container's PID 1 (JobSet pods) a SIGTERM without a
        # handler would be dropped by the kernel, and the pod killed at the end
        # of its grace period instead.
        relay = watchdog.NoticeRelay().install()
    from spottrain.trainer.stdio import survive_broken_pipes

    # Before logging captures sys.stdout: a dead log reader must not end training.
    survive_broken_pipes()
    _log_to_stdout_and_errors_to_stderr()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from spottrain.trainer import attempt

    if relay is not None:
        # Bad flags and values fail here, in the light supervisor, in well under a second.
        checked = attempt.check(argv)
        if checked.code is not None:
            return checked.code
        cmd = [sys.executable, "-m", "spottrain.trainer.task", *argv]
        return watchdog.supervise(cmd, argv, checked.cluster.name, relay=relay, cfg=checked.cfg)

    if "--check" in argv:
        from spottrain.trainer import check

        return check.run(argv)
    return attempt.run(argv, stop=stop)


def _log_to_stdout_and_errors_to_stderr() -> None:
    """Progress goes to stdout; the one error line of a failed attempt goes to stderr.

    Shells, ``make`` and CI show stderr as the failure; in a pod or a Vertex
    job both streams land in the same log, in order per stream.
    """
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    out = logging.StreamHandler(sys.stdout)
    out.addFilter(lambda record: record.levelno < logging.ERROR)
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.ERROR)
    for handler in (out, err):
        handler.setFormatter(fmt)
    logging.basicConfig(level=logging.INFO, handlers=[out, err])


if __name__ == "__main__":
    from spottrain.trainer.preemption import exit_process

    exit_process(main())
