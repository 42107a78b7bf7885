"""The least-privilege RBAC the JobSet launcher's service account needs.

Exactly the calls :class:`kube.JobSetKube` makes for :mod:`.launcher` and
:mod:`.component` (https://kubernetes.io/docs/reference/access-authn-authz/rbac/):
jobsets get/create/delete, and patch (resuming the on-demand JobSet after a move);
pods list (its gang), get (its own pod: image, service account, disruption), delete
(a pod stuck terminating past its grace on a node that does not answer); pods/log
get (following the chief's log is a get); and, cluster-wide because nodes are not
namespaced, nodes get (the labels that tell spot from on-demand; without it the ledger
says "unknown"). Deleting a JobSet needs no Job or pod verbs: the garbage collector
deletes its children. Discovery (is the JobSet API served?) is every authenticated
user's (the ``system:discovery`` ClusterRole). Not yet what ``make gke-rbac`` renders:
that is the Job engine's (``gke_job.rbac``) until the component runs this engine.
"""

from __future__ import annotations

RULES = [
    {
        "apiGroups": ["jobset.x-k8s.io"],
        "resources": ["jobsets"],
        "verbs": ["create", "get", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
]
CLUSTER_RULES = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
