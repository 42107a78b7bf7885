"""Cluster topology and strategy creation: the only reader of cluster env and AIP_* env.

Vertex AI sets ``TF_CONFIG`` with a ``chief`` pool plus a ``worker`` pool;
Kubernetes operators (TFJob) often use ``worker`` only, where worker 0 acts as
chief. The JobSet launcher sets no ``TF_CONFIG``: its pods get the
``spottrain.trainer.gang_env`` variables, from which the same ``worker``-only spec is
derived here. All are handled here so that no other module parses the environment.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass

from spottrain.exits import UNAVAILABLE, TrainerExit
from spottrain.placement import MAX_WORKERS
from spottrain.trainer import gang_env

log = logging.getLogger(__name__)

# RFC 1123 label, what Kubernetes requires of Job and Service names used as host names.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_GANG_VARS = (gang_env.JOB_NAME, gang_env.SERVICE, gang_env.WORKERS, gang_env.PORT)


@dataclass(frozen=True)
class Cluster:
    """This process's place in the cluster."""

    task_type: str  # "chief", "worker" or "" (single process)
    task_id: int
    num_workers: int  # all training tasks, chief included
    is_chief: bool
    # The cluster spec derived from a Job pod's env (None: TF_CONFIG or single process).
    job_spec: dict | None = None
    # The first non-chief worker: it records an attempt whose chief never started.
    deputy: bool = False

    @property
    def name(self) -> str:
        """A short name for logs and temp dirs, e.g. ``worker-1``."""
        return f"{self.task_type or 'single'}-{self.task_id}"

    @property
    def multi_worker(self) -> bool:
        """Whether this is one of several processes."""
        return self.num_workers > 1


def _whole(name: str, raw: str, low: int, high: int, what: str) -> int:
    """``raw`` as an int in [low, high], else ValueError naming the variable and value."""
    if not re.fullmatch(r"[0-9]{1,12}", raw) or not low <= int(raw) <= high:
        raise ValueError(f"{name}={raw!r} is not {what} from {low} to {high}")
    return int(raw)


def job_tf_config(environ: dict | None = None) -> dict | None:
    """The TF_CONFIG of a pod of the GKE launcher's Indexed Job, or None elsewhere.

    Kubernetes gives an Indexed Job's pod ``JOB_COMPLETION_INDEX`` and the host
    name ``<job>-<index>``, and with ``subdomain`` set to a headless Service the
    DNS name ``<job>-<index>.<service>`` (Job, "Completion mode":
    https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode
    and batch/v1 ``JobSpec.completionMode``: "the Pod hostname takes the form
    $(job-name)-$(index)"; DNS for Services and Pods, "Pod's hostname and
    subdomain fields": https://kubernetes.io/docs/concepts/services-networking/dns-pod-service/;
    the pattern itself: https://kubernetes.io/docs/tasks/job/job-with-pod-to-pod-communication/).
    So every pod knows every peer's address without asking the API server, and
    a replacement pod of the same index gets the same name. Worker 0 is the
    chief (no ``chief`` pool: TF's ``multi_worker_util.is_chief`` and
    :func:`read_cluster` agree).

    Only the launcher's own ``SPOTTRAIN_JOB_*`` variables switch this on: a
    ``JOB_COMPLETION_INDEX`` alone (someone else's Indexed Job) changes nothing.

    Raises:
        ValueError: one line naming the variable and its value: a missing or
            malformed index, an index outside ``[0, workers)``, a worker count
            below 1, a bad port or name, or ``TF_CONFIG`` set as well.
    """
    env = os.environ if environ is None else environ
    present = [name for name in _GANG_VARS if name in env]
    if not present:
        return None
    tf_config = env.get("TF_CONFIG", "").strip()
    if tf_config:
        # Two sources could describe two different clusters (a hang, or two
        # chiefs writing one checkpoint dir); refusing beats guessing which wins.
        raise ValueError(
            f"TF_CONFIG={tf_config[:200]!r} is set in a Job pod ({present[0]}="
            f"{env[present[0]]!r}): the cluster comes from the SPOTTRAIN_JOB_* variables; "
            "remove one of them"
        )
    names = {}
    for name in (gang_env.JOB_NAME, gang_env.SERVICE):
        value = env.get(name, "")
        if not _DNS_LABEL.fullmatch(value):
            raise ValueError(
                f"{name}={value!r} is not a DNS label (lower-case letters, digits and "
                "'-', at most 63)"
            )
        names[name] = value
    workers = _whole(
        gang_env.WORKERS, env.get(gang_env.WORKERS, ""), 1, MAX_WORKERS, "a worker count"
    )
    port = _whole(
        gang_env.PORT, env.get(gang_env.PORT, str(gang_env.DEFAULT_PORT)), 1, 65535, "a port"
    )
    index_raw = env.get(gang_env.JOB_COMPLETION_INDEX)
    if index_raw is None:
        raise ValueError(
            f"{gang_env.JOB_COMPLETION_INDEX} is not set, though {present[0]}={env[present[0]]!r} "
            "is: the pod must belong to an Indexed Job (completionMode: Indexed)"
        )
    index = _whole(
        gang_env.JOB_COMPLETION_INDEX, index_raw, 0, workers - 1, f"an index of {workers} worker(s)"
    )
    job, service = names[gang_env.JOB_NAME], names[gang_env.SERVICE]
    return {
        "cluster": {"worker": [f"{job}-{i}.{service}:{port}" for i in range(workers)]},
        "task": {"type": "worker", "index": index},
    }


def read_cluster(environ: dict | None = None) -> Cluster:
    """Parses TF_CONFIG, or derives it in a JobSet pod (neither: a single process).

    Raises:
        ValueError: TF_CONFIG is not valid JSON or does not name this task, or
            a Job pod's variables are wrong (see :func:`job_tf_config`).
    """
    env = os.environ if environ is None else environ
    job_spec = job_tf_config(env)
    if job_spec is not None:
        index = job_spec["task"]["index"]
        workers = len(job_spec["cluster"]["worker"])
        return Cluster(
            "worker", index, workers, is_chief=index == 0, job_spec=job_spec, deputy=index == 1
        )
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
    addresses = [a for pool in cluster.values() if isinstance(pool, list) for a in pool]
    repeated = sorted({a for a in addresses if addresses.count(a) > 1})
    if repeated:
        # Two tasks cannot both listen on one address: the second never starts and
        # MWMS waits for it until the start-up timeout.
        raise ValueError(f"TF_CONFIG lists {repeated[0]!r} for more than one task: {raw[:200]}")
    if task_type in ("chief", "master"):
        is_chief = True
    elif task_type == "worker":
        # Without a chief pool (TFJob style), worker 0 is the chief.
        is_chief = not cluster.get("chief") and task_id == 0
    else:
        raise ValueError(f"TF_CONFIG task type {task_type!r} is not a training task")
    chief_pool = cluster.get("chief") or cluster.get("master")
    deputy = task_type == "worker" and task_id == (0 if chief_pool else 1)
    return Cluster(task_type, task_id, max(num_workers, 1), is_chief, deputy=deputy)


def in_cluster(environ: dict | None = None) -> bool:
    """Whether a cluster spec is set or derived (this process is one of several replicas)."""
    env = os.environ if environ is None else environ
    return bool(env.get("TF_CONFIG", "").strip()) or any(name in env for name in _GANG_VARS)


def default_dirs(environ: dict | None = None) -> dict[str, str]:
    """Output dirs Vertex AI passes (``base_output_directory``), empty when unset."""
    env = os.environ if environ is None else environ
    return {
        "model_dir": env.get("AIP_MODEL_DIR", ""),
        "checkpoint_dir": env.get("AIP_CHECKPOINT_DIR", ""),
        "tensorboard_dir": env.get("AIP_TENSORBOARD_LOG_DIR", ""),
    }


def _own_address(cluster: Cluster) -> str:
    """This task's host:port in the cluster spec ("?" when there is none)."""
    spec = cluster.job_spec or json.loads(os.environ.get("TF_CONFIG") or "{}")
    try:
        return spec["cluster"][cluster.task_type][cluster.task_id]
    except (KeyError, IndexError, TypeError):
        return "?"


def create_strategy(cluster: Cluster, collective_timeout_s: float):
    """Builds the distribution strategy for this process.

    Several workers: MultiWorkerMirroredStrategy. A dead or frozen peer turns into an
    error, not an endless wait, without a collective timeout: MWMS starts TF's
    coordination service and relies on its heartbeats (TF 2.21
    ``collective_all_reduce_strategy.py``: ``configure_coordination_service`` at
    lines 551-567, "use its internal heartbeat to detect peer failures" at 581-584);
    measured here, a SIGKILLed peer fails the survivor's next collective at once
    ("Socket closed") and a SIGSTOPped one within ~8 s ("tasks are unhealthy
    (stopped sending heartbeats)"). ``collective_timeout_s`` > 0 adds TF's own
    per-collective timeout, off by default for its cost, which TF's docstring states
    (``collective_util.py`` lines 97-103: "only be used for debugging since it
    creates a new thread for each collective"): the thread sleeps the whole timeout
    even when the collective finished at once, so a worker holds ~steps/s x 6 x
    timeout threads (16,000 and "can't start new thread" at 130 steps/s with 60 s). One
    process: MirroredStrategy over local GPUs when there are several, otherwise
    the default strategy (no collective overhead on a single device).
    """
    import tensorflow as tf

    if cluster.multi_worker:
        options = tf.distribute.experimental.CommunicationOptions(
            timeout_seconds=collective_timeout_s or None
        )
        resolver = None  # TFConfigClusterResolver: TF reads TF_CONFIG itself
        if cluster.job_spec is not None:
            # The derived spec is handed over, not written to os.environ: TF_CONFIG
            # stays absent, so this process and its children see one source only.
            # A resolver that is not TFConfigClusterResolver reports the GPUs it is
            # given (collective_all_reduce_strategy._initialize_local_devices).
            gpus = len(tf.config.list_physical_devices("GPU"))
            resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
                tf.train.ClusterSpec(cluster.job_spec["cluster"]),
                task_type=cluster.task_type,
                task_id=cluster.task_id,
                num_accelerators={"GPU": gpus} if gpus else None,
                rpc_layer="grpc",
            )
        try:
            strategy = tf.distribute.MultiWorkerMirroredStrategy(
                cluster_resolver=resolver, communication_options=options
            )
        except tf.errors.UnknownError as e:
            if "Could not start gRPC server" not in str(e):
                raise
            # TF binds 0.0.0.0:<this task's port>; only a port another process holds
            # fails that, and it may be free on the next attempt.
            raise TrainerExit(
                UNAVAILABLE,
                f"{cluster.name} could not listen on its port ({_own_address(cluster)}: "
                "another process holds it); retryable",
            ) from None
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
