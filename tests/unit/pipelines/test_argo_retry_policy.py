"""`make kfp-retry-policy` and run-gke's pre-flight read of Argo's configmap.

The real ``kubernetes`` client reads the configmap through a kubeconfig, from a small
HTTP stand-in for the one API call it makes (``GET
/api/v1/namespaces/{ns}/configmaps/{name}``, a ConfigMap object as the API
reference shows it). The value it serves by default is the one KFP 2.17.0 ships
(``argo_retry.KFP_WORKFLOW_DEFAULTS``, cited there). run-gke's JobSet pre-flight asks
the same cluster too; the stand-in says JobSet is served and every verb allowed (that
check runs against a real API server in tests/system/gke/test_jobset_preflight_real_kube.py).
"""

from __future__ import annotations

import json
import shlex
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from kfp_api import run_cli

from spottrain.pipelines import __main__ as cli
from spottrain.pipelines import argo_retry

pytestmark = pytest.mark.filterwarnings("ignore:This client only works:FutureWarning")

# Another TTL than KFP's, to see that the patch keeps what the cluster has.
CUSTOM = argo_retry.KFP_WORKFLOW_DEFAULTS.replace(
    "secondsAfterSuccess: 3600", "secondsAfterSuccess: 60"
)


class ConfigMapApi(BaseHTTPRequestHandler):
    """``read_namespaced_config_map`` for the workflow controller's configmap."""

    value: str | None = argo_retry.KFP_WORKFLOW_DEFAULTS
    status = 200
    paths: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path.split("?")[0] == "/apis/jobset.x-k8s.io/v1alpha2":
            return self._send(200, {"kind": "APIResourceList", "groupVersion":
                                    "jobset.x-k8s.io/v1alpha2", "resources": [
                                        {"name": "jobsets", "namespaced": True,
                                         "kind": "JobSet", "verbs": ["get"]}]})  # fmt: skip
        ConfigMapApi.paths.append(self.path)
        name = f"/api/v1/namespaces/kubeflow/configmaps/{argo_retry.CONFIGMAP}"
        if self.status != 200 or self.path.split("?")[0] != name:
            status = self.status if self.status != 200 else 404
            body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status}
        else:
            status = 200
            data = {} if self.value is None else {argo_retry.KEY: self.value}
            body = {
                "kind": "ConfigMap", "apiVersion": "v1",
                "metadata": {"name": argo_retry.CONFIGMAP, "namespace": "kubeflow"},
                "data": data,
            }  # fmt: skip
        self._send(status, body)

    def do_POST(self):  # noqa: N802 - a SubjectAccessReview: allowed
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._send(201, {**review, "status": {"allowed": True}})

    def _send(self, status, body):
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


@pytest.fixture
def kube(tmp_path, monkeypatch):
    """A kubeconfig (KUBECONFIG) pointing at the stand-in; yields the handler class."""
    ConfigMapApi.value, ConfigMapApi.status, ConfigMapApi.paths = (
        argo_retry.KFP_WORKFLOW_DEFAULTS,
        200,
        [],
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), ConfigMapApi)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1", "kind": "Config", "current-context": "c",
                "clusters": [{"name": "k", "cluster": {
                    "server": f"http://127.0.0.1:{server.server_address[1]}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            }
        )
    )  # fmt: skip
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    yield ConfigMapApi
    server.shutdown()


def printed_value(out: str) -> str:
    """The workflowDefaults value in a printed `kubectl patch` command."""
    cmd = shlex.split(out.strip())
    assert cmd[:6] == ["kubectl", "-n", "kubeflow", "patch", "configmap", argo_retry.CONFIGMAP]
    return json.loads(cmd[cmd.index("-p") + 1])["data"][argo_retry.KEY]


def test_the_patch_keeps_the_live_defaults_and_sets_the_policy(kube, capsys):
    kube.value = CUSTOM
    code, out, err = run_cli("retry-policy", capsys=capsys)
    assert code == 0
    assert "from the live kubeflow/workflow-controller-configmap (context 'c')" in err
    value = printed_value(out)
    assert argo_retry.effective_policy(value) == "Always"
    doc = yaml.safe_load(value)
    assert doc["spec"]["ttlStrategy"]["secondsAfterSuccess"] == 60  # the cluster's, kept
    strategy = doc["spec"]["templateDefaults"]["retryStrategy"]
    assert strategy["limit"] == str(argo_retry.PREEMPTION_BUDGET)
    assert strategy["expression"] == argo_retry.preemption_expression()
    assert argo_retry.policy_problem(value) == ""
    code, out, _ = run_cli("retry-policy", "--preemption-budget", "20", capsys=capsys)
    assert template_strategy(printed_value(out))["limit"] == "20"
    # Argo's own policies, from the preemption one: its expression goes.
    kube.value = value
    code, out, _ = run_cli("retry-policy", "--policy", "OnFailure", capsys=capsys)
    assert argo_retry.effective_policy(printed_value(out)) == "OnFailure"
    assert "expression" not in template_strategy(printed_value(out))


def template_strategy(value: str) -> dict:
    return yaml.safe_load(value)["spec"]["templateDefaults"]["retryStrategy"]


def test_a_budget_below_one_is_one_line_exit_2(kube, capsys):
    code, out, err = run_cli("retry-policy", "--preemption-budget", "0", capsys=capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "preemption budget 0: must be at least 1" in err


def test_without_a_cluster_the_patch_starts_from_kfps_shipped_value(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    code, out, err = run_cli("retry-policy", capsys=capsys)
    assert code == 0 and "KFP 2.17.0's shipped value" in err
    assert printed_value(out) == argo_retry.with_policy(
        argo_retry.KFP_WORKFLOW_DEFAULTS, "preemption"
    )
    # Applying it needs the live value: one line, exit 2, nothing run.
    code, out, err = run_cli("retry-policy", "--execute", capsys=capsys)
    assert code == 2 and err.count("\n") == 1 and "--execute needs to read the live" in err


def _run_gke(host, capsys):
    return run_cli(
        "run-gke", "--host", host, "data_src=gs://my-bucket/d", "checkpoint_dir=gs://my-bucket/c",
        capsys=capsys,
    )  # fmt: skip


def test_run_gke_warns_in_one_line_on_kfps_shipped_policy_and_still_runs(kfp_api, kube, capsys):
    api, host = kfp_api
    code, out, err = _run_gke(host, capsys)
    assert code == 0 and "run_id=r1" in out
    assert err.splitlines() == [
        "warning: Argo's template retry policy in kubeflow/workflow-controller-configmap "
        "(context 'c') is OnError: a preempted task (exit 143) is not retried; fix it once "
        "with `make kfp-retry-policy EXECUTE=1` (retries preemptions only)"
    ]
    assert kube.paths and kube.paths[0].startswith(
        "/api/v1/namespaces/kubeflow/configmaps/workflow-controller-configmap"
    )


@pytest.mark.parametrize("policy", ["Always", "OnFailure"])
def test_run_gke_warns_when_the_cluster_retries_fatal_exits(kfp_api, kube, capsys, policy):
    kube.value = argo_retry.with_policy(argo_retry.KFP_WORKFLOW_DEFAULTS, policy)
    code, _, err = _run_gke(kfp_api[1], capsys)
    assert code == 0 and len(err.splitlines()) == 1
    assert f"is {policy}: fatal exits (bad input 64, NaN 65) are retried too" in err


@pytest.mark.parametrize("expression", [None, "asInt(lastRetry.exitCode) == 143"])
def test_run_gke_is_quiet_on_the_preemption_policy_or_an_owners_own_expression(
    kfp_api, kube, capsys, expression
):
    value = argo_retry.with_policy(argo_retry.KFP_WORKFLOW_DEFAULTS, "preemption")
    if expression:
        value = value.replace(argo_retry.preemption_expression(), expression)
    kube.value = value
    code, _, err = _run_gke(kfp_api[1], capsys)
    assert code == 0 and err == ""


def test_run_gke_warns_on_an_older_version_of_our_policy(kfp_api, kube, capsys):
    current = argo_retry.preemption_expression()
    kube.value = argo_retry.with_policy(argo_retry.KFP_WORKFLOW_DEFAULTS, "preemption").replace(
        current, current.replace("|neither main nor wait container completed", "")
    )
    code, _, err = _run_gke(kfp_api[1], capsys)
    assert code == 0 and len(err.splitlines()) == 1
    assert "is an older version of the preemption policy; fix it once" in err


@pytest.mark.parametrize("status", [403, 404])
def test_run_gke_is_quiet_when_the_configmap_cannot_be_read(kfp_api, kube, capsys, status):
    kube.status = status
    code, _, err = _run_gke(kfp_api[1], capsys)
    assert code == 0 and err == "" and kube.paths


def test_no_workflow_defaults_means_argos_own_on_failure():
    assert argo_retry.effective_policy("") == "OnFailure"
    assert argo_retry.effective_policy(argo_retry.KFP_WORKFLOW_DEFAULTS) == "OnError"
    assert argo_retry.effective_policy("spec:\n  templateDefaults:\n    retryStrategy:\n"
                                       "      expression: 'true'\n") == "Always"  # fmt: skip
    with pytest.raises(argo_retry.RetryPolicyError, match="is not a mapping"):
        argo_retry.effective_policy("- a list")
    assert cli  # the CLI module is what run_cli drives
