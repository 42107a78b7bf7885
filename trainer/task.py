"""Entry point: ``python -m trainer.task [flags]`` (``--help`` lists them).

Runs one attempt of a (possibly multi-worker) training run and exits with the
code documented in :mod:`trainer.preemption`.
"""

from __future__ import annotations

import logging
import os
import sys


def main(argv: list[str] | None = None) -> int:
    """Runs the trainer; returns its exit code."""
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
    )
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from trainer import train_lib

    return train_lib.run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # After a failure, skip interpreter shutdown: MWMS's coordination service
    # would wait at its shutdown barrier for peers that are gone.
    if code:
        os._exit(code)
    sys.exit(code)
