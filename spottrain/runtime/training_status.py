"""The ``training_status`` component's runtime: how far the run in a checkpoint dir got.

The on-demand fall-backs (GKE's ``fallback_decision``, Vertex's job launcher) decide
with it too.
"""

from __future__ import annotations

import logging

from spottrain.runtime.fallback_words import COMPLETED, FATAL, INCOMPLETE

log = logging.getLogger(__name__)


def training_status(checkpoint_dir: str, train_steps: int) -> str:
    """How far the run in ``checkpoint_dir`` got.

    Returns:
        :data:`FATAL` when the trainer left its FATAL marker (retrying is pointless),
        :data:`COMPLETED` when the newest checkpoint is at ``train_steps`` or beyond,
        else :data:`INCOMPLETE` (words of :mod:`spottrain.runtime.fallback_words`).
    """
    import tensorflow as tf

    from spottrain.trainer import checkpointing

    if tf.io.gfile.exists(f"{checkpoint_dir.rstrip('/')}/{checkpointing.FATAL_MARKER}"):
        return FATAL
    steps = [step for step, _ in checkpointing.list_checkpoints(checkpoint_dir)]
    done = bool(steps) and max(steps) >= int(train_steps)
    log.info(
        "checkpoint_dir=%s newest step %s of %s",
        checkpoint_dir,
        max(steps, default=None),
        train_steps,
    )
    return COMPLETED if done else INCOMPLETE
