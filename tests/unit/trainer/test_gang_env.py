"""TF_CONFIG derived from the GKE Indexed Job's pod env (spottrain.trainer.distribution),
fast.

The in-process tests; those that start processes are in
tests/integration/trainer/test_gang_env.py.
"""

from __future__ import annotations

import json

import pytest
from gang_envs import BAD, job_env

from spottrain.trainer import distribution, gang_env


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


@pytest.mark.parametrize("changes, named", BAD, ids=[b[1][:40] for b in BAD])
def test_bad_job_env_is_refused_naming_the_variable(changes, named):
    with pytest.raises(ValueError) as err:
        distribution.read_cluster(job_env(**changes))
    assert named in str(err.value) and "\n" not in str(err.value)
