"""Cluster topology and strategy creation: the only reader of TF_CONFIG and AIP_* env.

Vertex AI sets ``TF_CONFIG`` with a ``chief`` pool plus a ``worker`` pool;
Kubernetes operators (TFJob) often use ``worker`` only, where worker 0 acts as
chief. Both are handled here so that no other module parses the environment.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cluster:
    """This process's place in the cluster."""

    task_type: str  # "chief", "worker" or "" (single process)
    task_id: int
    num_workers: int  # all training tasks, chief included
    is_chief: bool

    @property
    def name(self) -> str:
        """A short name for logs and temp dirs, e.g. ``worker-1``."""
        return f"{self.task_type or 'single'}-{self.task_id}"

    @property
    def multi_worker(self) -> bool:
        """Whether this is one of several processes."""
        return self.num_workers > 1


def read_cluster(environ: dict | None = None) -> Cluster:
    """Parses TF_CONFIG (absent: a single process).

    Raises:
        ValueError: TF_CONFIG is not valid JSON or does not name this task.
    """
    env = os.environ if environ is None else environ
    raw = env.get("TF_CONFIG", "").strip()
    if not raw:
        return Cluster(task_type="", task_id=0, num_workers=1, is_chief=True)
    try:
        tf_config = json.loads(raw)
        cluster = tf_config.get("cluster", {})
        task = tf_config.get("task", {})
        task_type = task["type"]
        task_id = int(task.get("index", 0))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"TF_CONFIG is not a valid cluster spec ({e}): {raw[:200]}") from e
    # Evaluators and parameter servers do not take part in MWMS training.
    num_workers = len(cluster.get("chief", [])) + len(cluster.get("worker", []))
    pool = cluster.get("master" if task_type == "master" else task_type, [])
    if task_type in ("chief", "master", "worker") and not 0 <= task_id < len(pool):
        raise ValueError(
            f"TF_CONFIG task {task_type} index {task_id} is not in its pool of {len(pool)} "
            f"address(es): {raw[:200]}"
        )
    if task_type in ("chief", "master"):
        is_chief = True
    elif task_type == "worker":
        # Without a chief pool (TFJob style), worker 0 is the chief.
        is_chief = not cluster.get("chief") and task_id == 0
    else:
        raise ValueError(f"TF_CONFIG task type {task_type!r} is not a training task")
    return Cluster(task_type, task_id, max(num_workers, 1), is_chief)


def in_cluster(environ: dict | None = None) -> bool:
    """Whether a cluster spec is set (this process is one of several replicas)."""
    env = os.environ if environ is None else environ
    return bool(env.get("TF_CONFIG", "").strip())


def default_dirs(environ: dict | None = None) -> dict[str, str]:
    """Output dirs Vertex AI passes (``base_output_directory``), empty when unset."""
    env = os.environ if environ is None else environ
    return {
        "model_dir": env.get("AIP_MODEL_DIR", ""),
        "checkpoint_dir": env.get("AIP_CHECKPOINT_DIR", ""),
        "tensorboard_dir": env.get("AIP_TENSORBOARD_LOG_DIR", ""),
    }


def create_strategy(cluster: Cluster, collective_timeout_s: float):
    """Builds the distribution strategy for this process.

    Several workers: MultiWorkerMirroredStrategy with a collective timeout, so
    a dead or frozen peer turns into an error instead of an endless wait. One
    process: MirroredStrategy over local GPUs when there are several, otherwise
    the default strategy (no collective overhead on a single device).
    """
    import tensorflow as tf

    if cluster.multi_worker:
        options = tf.distribute.experimental.CommunicationOptions(
            timeout_seconds=collective_timeout_s
        )
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    elif len(tf.config.list_physical_devices("GPU")) > 1:
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    log.info(
        "strategy %s: %d replica(s) in sync, task %s",
        type(strategy).__name__,
        strategy.num_replicas_in_sync,
        cluster.name,
    )
    return strategy
