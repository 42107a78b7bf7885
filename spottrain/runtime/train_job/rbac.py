"""The least-privilege RBAC the JobSet launcher's service account needs.

Exactly the calls :class:`kube.Kube` makes for :mod:`.launcher` and
:mod:`.component` (https://kubernetes.io/docs/reference/access-authn-authz/rbac/):
jobsets get/create/delete, patch (resuming the next JobSet after a move) and list
(a launcher started again finds the gang a move made: ``launcher._reattach_point``);
pods list (its gang), get (its own pod: image, service account, disruption), delete
(a pod stuck terminating past its grace on a node that does not answer); pods/log
get (following the chief's log is a get); and, cluster-wide because nodes are not
namespaced, nodes get (the labels that tell spot from on-demand; without it the ledger
says "unknown"). For a gang queued in Kueue: its Workload list (found by the JobSet's
uid label) and its LocalQueue get (Kueue's status of it). Deleting a JobSet needs no
Job or pod verbs: the garbage collector
deletes its children. Discovery (is the JobSet API served?) is every authenticated
user's (the ``system:discovery`` ClusterRole).

``make gke-rbac`` renders them (a Role and RoleBinding, a ClusterRole and binding for
nodes), its names validated as the API server would.
"""

from __future__ import annotations

import re

import yaml

RULES = [
    {
        "apiGroups": ["jobset.x-k8s.io"],
        "resources": ["jobsets"],
        "verbs": ["create", "get", "list", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["list"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["get"]},
]
CLUSTER_RULES = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]

NAME = "spottrain-job-launcher"
# The service account KFP standalone runs pipeline pods as.
DEFAULT_SERVICE_ACCOUNT = "pipeline-runner"


# What the API server accepts (k8s.io/apimachinery pkg/util/validation/validation.go):
# a namespace is a DNS-1123 label (IsDNS1123Label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at
# most 63), a service account name a DNS-1123 subdomain (IsDNS1123Subdomain: labels
# joined by '.', at most 253).
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAMES = {
    "--namespace": (re.compile(_LABEL), 63, "a DNS-1123 label"),
    "--service-account": (re.compile(rf"{_LABEL}(\.{_LABEL})*"), 253, "a DNS-1123 subdomain"),
}


def name_problem(flag: str, value: str) -> str | None:
    """Why Kubernetes would refuse ``value`` for ``flag``, or ``None``."""
    pattern, longest, kind = _NAMES[flag]
    if len(value) <= longest and pattern.fullmatch(value):
        return None
    chars = "digits, '-' and '.'" if flag == "--service-account" else "digits and '-'"
    return (
        f"{flag} {value!r} is not a Kubernetes name: it must be {kind} (lower-case "
        f"letters, {chars}; a letter or digit first and last; at most {longest} characters)"
    )


def manifests(namespace: str, service_account: str = DEFAULT_SERVICE_ACCOUNT) -> list[dict]:
    """Role + RoleBinding in ``namespace``, ClusterRole + ClusterRoleBinding for nodes."""
    subject = [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]
    api = "rbac.authorization.k8s.io/v1"
    binding_name = f"{NAME}-{namespace}"
    return [
        {"apiVersion": api, "kind": "Role", "metadata": {"name": NAME, "namespace": namespace},
         "rules": RULES},
        {"apiVersion": api, "kind": "RoleBinding",
         "metadata": {"name": NAME, "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
         "subjects": subject},
        {"apiVersion": api, "kind": "ClusterRole", "metadata": {"name": f"{NAME}-nodes"},
         "rules": CLUSTER_RULES},
        {"apiVersion": api, "kind": "ClusterRoleBinding", "metadata": {"name": binding_name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": f"{NAME}-nodes"},
         "subjects": subject},
    ]  # fmt: skip


def render(namespace: str, service_account: str = DEFAULT_SERVICE_ACCOUNT) -> str:
    """The manifests as one multi-document YAML (``kubectl apply -f -``)."""
    return yaml.safe_dump_all(manifests(namespace, service_account), sort_keys=False)
