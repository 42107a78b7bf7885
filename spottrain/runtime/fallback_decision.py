"""The on-demand fall-back's runtime: decide whether to resume, then resume.

The GKE fall-back pipeline wraps the spot training in a ``dsl.ExitHandler``; its exit
task (``gke.fallback_component``) runs whatever happened to the spot run. A small
CPU step (:func:`decide_component`) reads the checkpoint dir, and only on
:data:`RESUME` does the exit task copy the data again and start the ``train``
component on the on-demand pool,
so a run that finished on spot never asks for an on-demand GPU node.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from spottrain.runtime.fallback_words import RESUME, settled
from spottrain.runtime.training_status import training_status

log = logging.getLogger(__name__)


def decide(state: str, progress: str) -> str:
    """What the fall-back does, from the spot run's final state and its checkpoints.

    The checkpoint decides, not the state: on KFP OSS the state is the MLMD state of
    the exit handler's DAG, which the launcher updates only when a task's launcher
    finishes and publishes (kubeflow/pipelines backend/src/v2/component/launcher_v2.go:227,
    2.17.0, `UpdateDAGExecutionsState(ctx, dag, pipeline)`), so a pod that was
    killed before it could publish leaves it RUNNING; and the DAG becomes FAILED
    as soon as one attempt fails (backend/src/v2/metadata/client.go:853-854
    `case failedTasks > 0:` / `newState = pb.Execution_FAILED`) even when a retry
    then succeeds. Only a cancelled run is honoured: its user asked to stop.

    Args:
        state: ``PipelineTaskFinalStatus.state`` (``COMPLETE``, ``FAILED``, ``CANCELED``,
            ``RUNNING``; kfp.local says ``SUCCEEDED`` or ``FAILED``).
        progress: :func:`spottrain.runtime.training_status.training_status` of the checkpoint
            dir (one of ``fallback_words.STATUSES``).

    Returns:
        One of ``fallback_words.DECISIONS``: ``RESUME``, ``COMPLETED``, ``FATAL`` or
        ``CANCELLED``.
    """
    return settled(progress, cancelled=state.upper() in ("CANCELED", "CANCELLED")) or RESUME


def decide_component(status: Mapping[str, Any], checkpoint_dir: str, train_steps: int) -> str:
    """The ``fallback_decision`` component body."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    state = str((status or {}).get("state", ""))
    progress = training_status(checkpoint_dir, train_steps)
    decision = decide(state, progress)
    log.info(
        "spot run of %s ended %s, checkpoints %s: %s",
        (status or {}).get("pipelineTaskName") or (status or {}).get("pipeline_task_name"),
        state or "(no state)",
        progress,
        decision,
    )
    return decision
