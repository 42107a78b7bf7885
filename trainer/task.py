"""Entry point: ``python -m trainer.task [flags]`` (``--help`` lists them).

Runs one attempt of a (possibly multi-worker) training run and exits with the
code documented in :mod:`trainer.preemption`. By default this process is a
light supervisor (no TensorFlow) that runs the trainer as its child and
watches it for hangs (see :mod:`trainer.watchdog`); signals are forwarded.
"""

from __future__ import annotations

import logging
import os
import sys


def main(argv: list[str] | None = None) -> int:
    """Runs the trainer (supervised unless ``--no-supervisor``); returns its exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
    )
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from trainer import watchdog

    if watchdog.HEARTBEAT_FD_ENV not in os.environ and "--no-supervisor" not in argv:
        return _supervise(argv)
    from trainer import train_lib

    return train_lib.run(argv)


def _supervise(argv: list[str]) -> int:
    from trainer import config, distribution, watchdog
    from trainer.preemption import ConfigError

    try:
        cfg = config.parse_args(argv, distribution.default_dirs())
        name = distribution.read_cluster().name
    except (ConfigError, ValueError):
        cfg, name = config.TrainConfig(), "trainer"  # the child reports the error itself
    cmd = [sys.executable, "-m", "trainer.task", *argv]
    return watchdog.Supervisor(cmd, cfg.hang_timeout, cfg.startup_timeout, name).run()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # After a failure, skip interpreter shutdown: MWMS's coordination service
    # would wait at its shutdown barrier for peers that are gone.
    if code:
        os._exit(code)
    sys.exit(code)
