"""KFP's Argo retry policy: what a standard install ships, the fix, and the pre-flight read.

Every standard KFP 2.17.0 install patches Argo's ``workflow-controller-configmap``
with workflow defaults whose template defaults carry a retry policy
(kubeflow/pipelines 2.17.0, commit 4a3592cb2dd0a91a4652ab93893ec8beda1f3158,
``manifests/kustomize/third-party/argo/base/workflow-controller-configmap-patch.yaml``
L50-59 `workflowDefaults: |` … `retryStrategy:` / `limit: '2'` / `retryPolicy: OnError`;
the base ``kustomization.yaml:9`` applies the patch, and the ``platform-agnostic``,
``platform-agnostic-postgresql``, ``gcp`` and ``platform-agnostic-multi-user``
overlays all include that base). Argo merges the template defaults into every
template with a strategic merge patch in which the template's own fields win
(argoproj/argo-workflows v4.0.5, commit 0ab1452144d8f4d57c50b37ce50dad218868e950,
``workflow/controller/operator.go:2133`` `woc.mergedTemplateDefaultsInto(resolvedTmpl)`,
:4480 `strategicpatch.StrategicMergePatch(tmplDefaultsJSON, targetTmplJSON,
wfv1.Template{})`). KFP compiles ``set_retry`` into a ``retryStrategy`` with a limit
and a backoff but no ``retryPolicy`` (``backend/src/v2/compiler/argocompiler/
container.go:667-686`` at 2.17.0), so the merged template keeps ``OnError``, and
``OnError`` retries a node that ended ``Error`` (its pod vanished) but not one that
ended ``Failed`` (operator.go:1106-1108 `case wfv1.RetryPolicyOnError:` /
`retryOnFailed = false`, :1123 `Node not set to be retried`). A pod that saved on a
preemption notice and exited 143 is ``Failed``: on a standard install it is not
retried, whatever ``set_retry`` says.

The fix is the cluster's (KFP's task spec has no retry-policy field): ``Always``
(``python -m spottrain.pipelines retry-policy``, ``make kfp-retry-policy``). Not
``OnFailure``: a preempted pod ends ``Failed`` when the kubelet's graceful shutdown
ran, but ``Error`` ("pod deleted", operator.go:1289) when its node was removed with
it before Argo saw the end, and only ``Always`` retries both (operator.go:1103-1105).
The cost: every template of every run without its own retry settings then retries
failures up to the default limit (2) as well, not only errors, and DAG templates too,
so that the limits multiply along KFP's four nested levels (entrypoint DAG, root DAG,
executor DAG, pod). Argo watches its configmap and reloads it
(workflow/controller/controller.go:475, :508), so the patch takes effect for new nodes
without a restart.

Hence the ``preemption`` policy (the default of ``make kfp-retry-policy``): the same
patch with ``retryStrategy.expression``, which Argo evaluates per attempt after the
limit (operator.go:1135-1151, with ``lastRetry.exitCode/status/message``,
operator.go:2050-2070). What each policy does to a KFP-shaped workflow, run through
Argo's own controller code, is in tests/system/kfp/test_argo_retry_controller.py.
"""

from __future__ import annotations

import json
import logging
import os
import shlex

import yaml

from spottrain.runtime import termination

log = logging.getLogger(__name__)

CONFIGMAP = "workflow-controller-configmap"
# Where a standard install runs Argo's controller (both standalone and multi-user).
ARGO_NAMESPACE = "kubeflow"
KEY = "workflowDefaults"
RECOMMENDED_POLICY = "preemption"
# Policies that retry a Failed node (exit 143 after a save on notice): operator.go:1102-1117.
RETRIES_FAILED = ("Always", "OnFailure")
ARGO_POLICIES = ("Always", "OnFailure", "OnError", "OnTransientError")
POLICIES = (RECOMMENDED_POLICY, *ARGO_POLICIES)
# Retries of a preempted template that has no limit of its own (a KFP task without
# set_retry, KFP's drivers); a task's set_retry(num_retries=N) limit wins (Argo's
# strategic merge keeps the template's own fields, operator.go:4480) and bounds all its
# retries, preemptions included, since Argo checks the limit before the expression.
PREEMPTION_BUDGET = 10
# How a preemption reaches Argo's node message (lastRetry.message): the pod vanished
# with its node ("pod deleted": the controller's own, operator.go:1289); the kubelet's
# graceful node shutdown set pod.status.message (k8s.io/kubernetes v1.34.3
# pkg/kubelet/nodeshutdown/nodeshutdown_manager.go:89), which inferFailedReason takes
# first (operator.go:1710-1713); PodGC marked the pod Failed after its Node object
# was deleted (pkg/controller/podgc/gc_controller.go:248-255, 349-351), its containers
# never ended, so Argo says neither ended (operator.go:1803-1804); or our component
# marked a retryable exit (a save on GCE's metadata notice, 170-172) in the container's
# termination message, which Argo appends (operator.go:1766-1769), since KFP's launcher
# made its code 1 (spottrain.runtime.termination).
PREEMPTION_MESSAGES = (
    "pod deleted",
    "imminent node shutdown",
    "neither main nor wait container completed",
    termination.RETRYABLE_MARK,
)
# What our components write to the container's termination message on a fatal exit
# (spottrain.runtime.termination says why the exit code cannot).
FATAL_MARK = termination.FATAL_MARK


def preemption_expression() -> str:
    """Argo's ``retryStrategy.expression`` of the ``preemption`` policy.

    Never after our marked fatal exits. Always when the pod was preempted, on every
    task: 143 (SIGTERM on KFP's pods: Argo's emissary), a 137 that is not
    ``OOMKilled`` (a kill from outside, the kubelet's at the end of a disruption's
    grace; Argo reads no pod condition, so a ``DisruptionTarget`` alone shows only
    so), or a preemption message (:data:`PREEMPTION_MESSAGES`, our retryable mark
    among them). Other pod failures (a crash, ``OOMKilled``) only in a template that
    has KFP's ``retry-max-count`` input, i.e. a task with ``set_retry``
    (container.go getTaskRetryParameters at KFP 2.17.0). That placeholder is resolved
    where the input exists and left as written elsewhere (Argo's SubstituteParams
    allows unresolved tags, workflow/common/util.go:232,272). A DAG has no exit code
    (``-1``, operator.go:2060-2064) and is never retried: its pods retry themselves.

    Argo waits out a task's backoff *before* it evaluates this (operator.go:1087-1091
    return "Backoff for ..." until the wait is over; the expression is read at
    :1141-1151), so a marked fatal exit of a task with ``set_retry`` fails only after
    its first backoff; Argo has no setting that fails it sooner.
    """
    preempted = "|".join(PREEMPTION_MESSAGES)
    return (
        "(lastRetry.exitCode == '143' || "
        "(lastRetry.exitCode == '137' && !(lastRetry.message contains 'OOMKilled')) || "
        f"lastRetry.message matches '{preempted}' || "
        "(asInt(lastRetry.exitCode) > 0 && "
        "'{{inputs.parameters.retry-max-count}}' matches '^[0-9]+$')) && "
        f"!(lastRetry.message contains '{FATAL_MARK}')"
    )


# KFP 2.17.0's shipped value of the key, as the patch file above writes it.
KFP_WORKFLOW_DEFAULTS = """\
spec:
  ttlStrategy:
    secondsAfterCompletion: 3600
    secondsAfterSuccess: 3600
    secondsAfterFailure: 3600
  templateDefaults:
    retryStrategy:
      limit: '2'
      retryPolicy: OnError
"""


class RetryPolicyError(ValueError):
    """The configmap's value cannot be read or changed; the message says which and why."""


def template_retry_strategy(workflow_defaults: str) -> dict:
    """The ``retryStrategy`` every template inherits from a ``workflowDefaults`` value."""
    try:
        doc = yaml.safe_load(workflow_defaults or "") or {}
    except yaml.YAMLError as err:
        raise RetryPolicyError(f"{KEY} is not YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise RetryPolicyError(f"{KEY} is not a mapping")
    spec = doc.get("spec") or {}
    defaults = spec.get("templateDefaults") or {}
    strategy = defaults.get("retryStrategy") if isinstance(defaults, dict) else None
    return dict(strategy) if isinstance(strategy, dict) else {}


def effective_policy(workflow_defaults: str) -> str:
    """The policy a KFP task with ``set_retry`` gets (Argo's default when none is set).

    pkg/apis/workflow/v1alpha1/workflow_types.go:2295-2303 (v4.0.5): an explicit
    policy wins; without one, ``Always`` if an expression is set, else ``OnFailure``.
    """
    return _actual_policy(template_retry_strategy(workflow_defaults))


def _actual_policy(strategy: dict) -> str:
    if strategy.get("retryPolicy"):
        return str(strategy["retryPolicy"])
    return "Always" if strategy.get("expression") else "OnFailure"


def with_policy(workflow_defaults: str, policy: str, budget: int = PREEMPTION_BUDGET) -> str:
    """``workflow_defaults`` with the template defaults' retry policy set to ``policy``.

    ``preemption``: ``Always`` with :func:`preemption_expression` and ``budget`` as the
    limit; one of Argo's policies: that policy, no expression, the limit kept (KFP's
    ``2`` when none). Everything else in the value (the TTL strategy, other defaults)
    is kept.
    """
    if policy not in POLICIES:
        raise RetryPolicyError(f"policy {policy!r}: expected one of {', '.join(POLICIES)}")
    if budget < 1:
        raise RetryPolicyError(f"preemption budget {budget}: must be at least 1")
    doc = yaml.safe_load(workflow_defaults or "") or {}
    if not isinstance(doc, dict):
        raise RetryPolicyError(f"{KEY} is not a mapping")
    spec = doc.setdefault("spec", {})
    strategy = spec.setdefault("templateDefaults", {}).setdefault("retryStrategy", {})
    if policy == RECOMMENDED_POLICY:
        strategy.update(limit=str(budget), retryPolicy="Always", expression=preemption_expression())
    else:
        strategy.pop("expression", None)
        strategy.setdefault("limit", "2")  # KFP's shipped limit for templates without their own
        strategy["retryPolicy"] = policy
    return yaml.safe_dump(doc, sort_keys=False, width=1000)


def policy_problem(workflow_defaults: str) -> str:
    """What the live value gets wrong for preemptible training, or ``""``.

    Another expression than ours is the cluster owner's choice: not judged.
    """
    strategy = template_retry_strategy(workflow_defaults)
    expression = strategy.get("expression")
    if expression:
        if FATAL_MARK in str(expression) and expression != preemption_expression():
            return "is an older version of the preemption policy"
        return ""
    policy = _actual_policy(strategy)
    if policy not in RETRIES_FAILED:
        return f"is {policy}: a preempted task (exit 143) is not retried"
    return (
        f"is {policy}: fatal exits (bad input 64, NaN 65) are retried too, and every DAG "
        "level multiplies the retries"
    )


def patch_command(
    workflow_defaults: str,
    policy: str,
    namespace: str = ARGO_NAMESPACE,
    budget: int = PREEMPTION_BUDGET,
) -> list[str]:
    """The ``kubectl patch`` that sets ``policy`` in the configmap's ``workflowDefaults``."""
    body = json.dumps({"data": {KEY: with_policy(workflow_defaults, policy, budget)}})
    return ["kubectl", "-n", namespace, "patch", "configmap", CONFIGMAP, "--type", "merge",
            "-p", body]  # fmt: skip


def format_command(cmd: list[str]) -> str:
    """One copy-pasteable shell line."""
    return shlex.join(cmd)


def _kubeconfig() -> str | None:
    """The kubeconfig path(s) now: the client reads ``KUBECONFIG`` only once, at its import."""
    return os.environ.get("KUBECONFIG") or None


def current_context() -> str:
    """The kubeconfig's current context: the cluster :func:`read_live` reads."""
    from kubernetes import config

    try:
        _, active = config.list_kube_config_contexts(_kubeconfig())
    except Exception:  # noqa: BLE001 - only a label for the message
        return "the kubeconfig's cluster"
    return f"context {active['name']!r}" if active else "the kubeconfig's cluster"


def check_kubeconfig():
    """A client of the kubeconfig's current cluster (no request is made).

    Raises:
        RetryPolicyError: no kubeconfig, or one without a usable current context.
    """
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        return config.new_client_from_config(_kubeconfig())
    except (ConfigException, OSError, TypeError) as err:
        raise RetryPolicyError(f"no usable kubeconfig ({str(err).splitlines()[0]})") from None


def read_live(namespace: str = ARGO_NAMESPACE, timeout: float = 5.0) -> str | None:
    """The ``workflowDefaults`` value of the kubeconfig's current cluster.

    That need not be the cluster behind the KFP host a run goes to: the messages
    name the context. Returns ``None`` when the key is absent. Raises
    :class:`RetryPolicyError` naming why it cannot be read (no kubeconfig, no
    permission, unreachable).
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api_client = check_kubeconfig()
    try:
        with api_client:
            cm = client.CoreV1Api(api_client).read_namespaced_config_map(
                CONFIGMAP, namespace, _request_timeout=timeout
            )
    except ApiException as err:
        raise RetryPolicyError(f"the API server answered {err.status} {err.reason}") from None
    except Exception as err:  # urllib3's connection and timeout errors
        raise RetryPolicyError(f"the API server cannot be reached ({type(err).__name__})") from None
    return (cm.data or {}).get(KEY)


def preflight_warning(namespace: str = ARGO_NAMESPACE) -> str:
    """One line when the cluster's policy does not retry a preempted task, else ``""``.

    Read through the local kubeconfig when there is one and it may read the
    configmap; silent otherwise (many KFP users reach only the dashboard), which the
    retry section of docs/gke.md covers.
    """
    try:
        problem = policy_problem(read_live(namespace) or "")
    except RetryPolicyError as err:
        log.debug("retry policy not checked: %s", err)
        return ""
    if not problem:
        return ""
    return (
        f"warning: Argo's template retry policy in {namespace}/{CONFIGMAP} "
        f"({current_context()}) {problem}; fix it once with "
        f"`make kfp-retry-policy EXECUTE=1` (retries preemptions only)"
    )
