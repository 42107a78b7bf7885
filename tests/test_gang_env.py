"""TF_CONFIG derived from the GKE Indexed Job's pod env (spottrain.trainer.distribution), fast.

The pod side for real (PID 1, own network namespaces, SIGTERM/SIGKILL) is in
tests/test_platform_gke_job.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from trainer_helpers import REPO, env

from spottrain.trainer import distribution, gang_env, preemption


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


def test_the_contract_names_are_fixed():
    # The launcher (another module) sets exactly these: a rename breaks the pods.
    assert (gang_env.JOB_COMPLETION_INDEX, gang_env.JOB_NAME, gang_env.SERVICE) == (
        "JOB_COMPLETION_INDEX",
        "SPOTTRAIN_JOB_NAME",
        "SPOTTRAIN_JOB_SERVICE",
    )
    assert (gang_env.WORKERS, gang_env.PORT, gang_env.DEFAULT_PORT) == (
        "SPOTTRAIN_JOB_WORKERS",
        "SPOTTRAIN_JOB_PORT",
        2222,
    )


def test_peers_are_the_pods_stable_dns_names_worker_0_is_chief():
    spec = distribution.job_tf_config(job_env(index="1"))
    assert spec == {
        "cluster": {
            "worker": [
                "train-abc-0.train-abc-svc:2222",
                "train-abc-1.train-abc-svc:2222",
                "train-abc-2.train-abc-svc:2222",
            ]
        },
        "task": {"type": "worker", "index": 1},
    }
    worker = distribution.read_cluster(job_env(index="1"))
    assert (worker.name, worker.num_workers, worker.is_chief) == ("worker-1", 3, False)
    assert worker.job_spec == spec and worker.multi_worker
    chief = distribution.read_cluster(job_env(index="0"))
    assert chief.is_chief and chief.name == "worker-0"
    # The same spec as TF_CONFIG reads the same (TFJob style: worker 0 is chief).
    as_tf_config = distribution.read_cluster({"TF_CONFIG": json.dumps(spec)})
    assert (as_tf_config.task_id, as_tf_config.num_workers, as_tf_config.is_chief) == (1, 3, False)
    assert distribution.in_cluster(job_env()) and not distribution.in_cluster({})


def test_port_and_a_one_worker_job():
    spec = distribution.job_tf_config(job_env(index="0", workers="1", SPOTTRAIN_JOB_PORT="3000"))
    assert spec["cluster"]["worker"] == ["train-abc-0.train-abc-svc:3000"]
    one = distribution.read_cluster(job_env(index="0", workers="1"))
    # One pod (with all its GPUs) is not multi-worker: no MWMS, no gRPC server.
    assert one.is_chief and not one.multi_worker


def test_outside_a_launcher_job_nothing_changes():
    # Someone else's Indexed Job: JOB_COMPLETION_INDEX alone is not ours.
    assert distribution.job_tf_config({"JOB_COMPLETION_INDEX": "3"}) is None
    assert distribution.read_cluster({"JOB_COMPLETION_INDEX": "3"}).task_type == ""
    tf_config = json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker"}})
    c = distribution.read_cluster({"JOB_COMPLETION_INDEX": "0", "TF_CONFIG": tf_config})
    assert c.job_spec is None and c.name == "worker-0"


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


@pytest.mark.parametrize("changes, named", BAD, ids=[b[1][:40] for b in BAD])
def test_bad_job_env_is_refused_naming_the_variable(changes, named):
    with pytest.raises(ValueError) as err:
        distribution.read_cluster(job_env(**changes))
    assert named in str(err.value) and "\n" not in str(err.value)


@pytest.mark.integration
@pytest.mark.parametrize(
    "changes, named",
    [BAD[0], BAD[4], BAD[6], BAD[10], BAD[-1]],
    ids=["index", "index-range", "workers", "port", "tf-config-too"],
)
def test_bad_job_env_exits_64_in_one_line_before_tensorflow(tmp_path, changes, named):
    args = [
        "--checkpoint-dir", str(tmp_path / "ck"), "--model-dir", str(tmp_path / "m"),
        "--image-dir", str(tmp_path), "--backbone", "small_cnn", "--weights", "none",
    ]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "spottrain.trainer.task", *args],
        cwd=REPO,
        env={**env(), **job_env(**changes)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    seconds = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode == preemption.FATAL_CONFIG, out
    (line,) = [ln for ln in out.splitlines() if " ERROR " in ln]
    assert named in line and "Traceback" not in out
    assert seconds < 3, f"{seconds:.1f} s"
