"""The pod environment a GKE Indexed Job gives a worker: shared by the gang-env tests."""

from __future__ import annotations

from spottrain.trainer import gang_env


def job_env(index="1", workers="3", **extra) -> dict:
    """What the launcher's Job gives a pod (JOB_COMPLETION_INDEX is Kubernetes')."""
    e = {
        gang_env.JOB_COMPLETION_INDEX: index,
        gang_env.JOB_NAME: "train-abc",
        gang_env.SERVICE: "train-abc-svc",
        gang_env.WORKERS: workers,
    }
    e.update(extra)
    return {k: v for k, v in e.items() if v is not None}


BAD = [
    # (env changes, the text the one line must contain)
    (dict(index="abc"), "JOB_COMPLETION_INDEX='abc'"),
    (dict(index="-1"), "JOB_COMPLETION_INDEX='-1'"),
    (dict(index="1.0"), "JOB_COMPLETION_INDEX='1.0'"),
    (dict(index=""), "JOB_COMPLETION_INDEX=''"),
    (dict(index="3"), "JOB_COMPLETION_INDEX='3' is not an index of 3 worker(s) from 0 to 2"),
    (dict(index=None), "JOB_COMPLETION_INDEX is not set"),
    (dict(workers="0"), "SPOTTRAIN_JOB_WORKERS='0'"),
    (dict(workers="two"), "SPOTTRAIN_JOB_WORKERS='two'"),
    (dict(workers="999999999999"), "SPOTTRAIN_JOB_WORKERS='999999999999'"),
    (dict(workers=None), "SPOTTRAIN_JOB_WORKERS=''"),
    (dict(SPOTTRAIN_JOB_PORT="0"), "SPOTTRAIN_JOB_PORT='0'"),
    (dict(SPOTTRAIN_JOB_PORT="65536"), "SPOTTRAIN_JOB_PORT='65536'"),
    (dict(SPOTTRAIN_JOB_PORT="http"), "SPOTTRAIN_JOB_PORT='http'"),
    (dict(SPOTTRAIN_JOB_NAME="Train_1"), "SPOTTRAIN_JOB_NAME='Train_1'"),
    (dict(SPOTTRAIN_JOB_SERVICE=""), "SPOTTRAIN_JOB_SERVICE=''"),
    (dict(TF_CONFIG='{"cluster": {}}'), "TF_CONFIG='{\"cluster\": {}}' is set in a Job pod"),
]
