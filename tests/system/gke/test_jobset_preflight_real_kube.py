"""run-gke's JobSet pre-flight (pipelines/jobset_check.py) against a real API server.

kube-cp's kube-apiserver answers the discovery and the SubjectAccessReviews with its
real RBAC authorizer; the kubeconfig is the user's (admin here). The run is refused
before KFP is asked: its host is the discard port, which would give exit 69.
"""

from __future__ import annotations

import logging

import pytest
from real_jobset import (
    MARKS,
    jobset_kube_fixture,  # noqa: F401 - the fixture, by import
)
from real_kube import real_kube_fixture  # noqa: F401 - a fixture, by import

from spottrain.pipelines import __main__ as cli
from spottrain.pipelines import compile as comp
from spottrain.pipelines import jobset_check
from spottrain.runtime.train_job import rbac

pytestmark = MARKS  # slow; skipped without kube-cp or `make jobset`'s outputs
UNREACHABLE = "http://127.0.0.1:9"


def run_gke(pushed_dir, namespace: str) -> list[str]:
    return ["run-gke", "--host", UNREACHABLE, "--namespace", namespace,
            "--pipeline", str(pushed_dir / comp.gke_yaml("spot", engine="job")),
            "data_src=gs://my-bucket/d", "checkpoint_dir=gs://my-bucket/c"]  # fmt: skip


def test_exactly_the_launchers_rbac_passes_and_a_missing_verb_is_named(
    jobset_kube, monkeypatch, pushed_compiled_dir, capsys
):
    cp = jobset_kube
    monkeypatch.setenv("KUBECONFIG", cp.kubeconfig)
    cp.namespace_with_launcher_account("pf-ok", account=jobset_check.PROFILE_ACCOUNT)
    assert jobset_check.problem("pf-ok") == ""  # every verb granted: silent
    rules = [dict(r) for r in rbac.RULES]
    rules[0] = {**rules[0], "verbs": ["get", "list", "patch", "delete"]}  # no create jobsets
    cp.namespace_with_launcher_account("pf-nocreate", rules=rules, cluster_rules=[],
                                       account=jobset_check.PROFILE_ACCOUNT)  # fmt: skip
    line = jobset_check.problem("pf-nocreate")
    assert "pf-nocreate/default-editor may not create jobsets, get nodes" in line, line
    assert "make gke-rbac NAMESPACE=pf-nocreate SERVICE_ACCOUNT=default-editor" in line
    assert "\n" not in line
    assert cli.main(run_gke(pushed_compiled_dir, "pf-nocreate")) == 2  # not 69: KFP not asked
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "may not create jobsets" in err, err


def test_a_cluster_without_jobset_is_refused_in_one_line(
    real_kube, monkeypatch, pushed_compiled_dir, capsys
):
    monkeypatch.setenv("KUBECONFIG", real_kube.kubeconfig)
    line = jobset_check.problem("kubeflow")
    assert "no JobSet API" in line and "make gke-jobset EXECUTE=1" in line, line
    assert cli.main(run_gke(pushed_compiled_dir, "kubeflow")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no JobSet API" in err, err
    # The in-pod pipeline does not need JobSet: it goes on to KFP (unreachable here: 69).
    in_pod = run_gke(pushed_compiled_dir, "kubeflow")
    in_pod[in_pod.index("--pipeline") + 1] = str(pushed_compiled_dir / comp.gke_yaml("spot"))
    assert cli.main(in_pod) == 69


def test_a_queue_on_a_cluster_without_kueue_is_refused_at_submit_in_one_line(
    jobset_kube, monkeypatch, pushed_compiled_dir, capsys
):
    cp = jobset_kube
    monkeypatch.setenv("KUBECONFIG", cp.kubeconfig)
    cp.namespace_with_launcher_account("pf-queue", account=jobset_check.PROFILE_ACCOUNT)
    line = jobset_check.problem("pf-queue", queue="team-a")
    assert "queue 'team-a': this cluster has no Kueue" in line and "\n" not in line, line
    assert jobset_check.problem("pf-queue") == ""  # no queue asked: nothing of Kueue's
    assert cli.main([*run_gke(pushed_compiled_dir, "pf-queue"), "queue=team-a"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "has no Kueue" in err, err


def test_a_cluster_that_cannot_be_asked_is_silent(tmp_path, monkeypatch):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:9\n"
        "contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n"
        "users:\n- name: u\n  user:\n    token: t\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert jobset_check.problem("kubeflow") == ""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    assert jobset_check.problem("kubeflow") == ""


def test_a_queue_that_cannot_be_checked_at_submit_is_said_in_one_line(
    tmp_path, monkeypatch, caplog
):
    """docs/gke.md: a queue=… that submit could not ask the cluster about is not silent."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    with caplog.at_level(logging.DEBUG, logger=jobset_check.__name__):
        assert jobset_check.problem("kubeflow", queue="team-a") == ""
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert line.startswith("queue='team-a' not checked at submit (no usable kubeconfig")
    assert "launcher checks the LocalQueue" in line and "\n" not in line


@pytest.mark.parametrize(("namespace", "account"), [("kubeflow", "pipeline-runner"),
                                                    ("team-a", "default-editor")])  # fmt: skip
def test_the_account_is_kfps_for_the_namespace(namespace, account):
    assert jobset_check.account_for(namespace) == account
