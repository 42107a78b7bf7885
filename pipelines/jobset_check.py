"""run-gke's pre-flight for the JobSet engine: the JobSet API served, the launcher's RBAC.

Asked through the local kubeconfig's current context, as ``make kfp-retry-policy``'s
check is: the JobSet API by discovery (the launcher's own :meth:`Kube.check_api`), and
each verb the launcher needs by a SubjectAccessReview for the pipeline's service
account (``authorization.k8s.io/v1``: the API server answers with the same authorizer
that will judge the launcher's calls,
https://kubernetes.io/docs/reference/access-authn-authz/authorization/#checking-api-access).
Silent when there is no kubeconfig, the cluster cannot be reached or the user may not
ask (many KFP users reach only the dashboard); the launcher then says the same at run
time (one line, exit 64).
"""

from __future__ import annotations

import logging

from spottrain.pipelines import argo_retry
from spottrain.runtime.train_job import rbac

log = logging.getLogger(__name__)

# Where KFP runs pipeline pods, and as whom: standalone in ``kubeflow`` as
# ``pipeline-runner``; multi-user in the profile namespace as ``default-editor``.
STANDALONE = ("kubeflow", rbac.DEFAULT_SERVICE_ACCOUNT)
PROFILE_ACCOUNT = "default-editor"


class Unknown(Exception):
    """The cluster could not be asked (no kubeconfig, no answer, no permission to ask)."""


def _skipped(err: Exception, queue: str) -> None:
    """Silent, but for a queue: a user who named one is told it was not checked here."""
    if queue:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        log.warning(
            "queue=%r not checked at submit (%s): the launcher checks the LocalQueue in its "
            "pod and refuses a missing one (exit 64)", queue, first,
        )  # fmt: skip
    else:
        log.debug("JobSet pre-flight skipped: %s", err)


def account_for(namespace: str) -> str:
    """The service account KFP runs the launcher pod as in ``namespace``."""
    return STANDALONE[1] if namespace == STANDALONE[0] else PROFILE_ACCOUNT


def needed() -> list[tuple[str, str, str, bool]]:
    """(group, resource, verb, namespaced) of every call the launcher makes."""
    return [
        (group, resource, verb, namespaced)
        for rules, namespaced in ((rbac.RULES, True), (rbac.CLUSTER_RULES, False))
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    ]


def missing_verbs(api_client, namespace: str, account: str) -> list[str]:
    """The launcher's calls ``account`` may not make, as ``verb resource``.

    Raises:
        Unknown: the review cannot be asked for.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    authz = client.AuthorizationV1Api(api_client)
    user = f"system:serviceaccount:{namespace}:{account}"
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}",
              "system:authenticated"]  # fmt: skip
    out = []
    for group, resource, verb, namespaced in needed():
        resource, _, sub = resource.partition("/")
        attrs = {"group": group, "resource": resource, "verb": verb}
        attrs.update({"namespace": namespace} if namespaced else {})
        attrs.update({"subresource": sub} if sub else {})
        review = {"spec": {"user": user, "groups": groups, "resourceAttributes": attrs}}
        try:
            done = authz.create_subject_access_review(review, _request_timeout=5)
        except ApiException as err:
            raise Unknown(f"SubjectAccessReview answered {err.status} {err.reason}") from None
        except Exception as err:  # urllib3's connection and timeout errors
            raise Unknown(f"the API server cannot be reached ({type(err).__name__})") from None
        if not done.status.allowed:
            out.append(f"{verb} {resource}{'/' + sub if sub else ''}")
    return out


def problem(namespace: str, account: str = "", queue: str = "") -> str:
    """One line saying what the cluster lacks for the JobSet engine, or ``""``.

    With ``queue``, also Kueue's API and that LocalQueue in ``namespace``.

    ``""`` also when it cannot be asked (see the module docstring).
    """
    from spottrain.runtime.train_job import kube

    account = account or account_for(namespace)
    try:
        api_client = argo_retry.check_kubeconfig()
    except argo_retry.RetryPolicyError as err:
        _skipped(err, queue)
        return ""
    where = argo_retry.current_context()
    with api_client:
        try:
            # One try, 5 s: a pre-flight that cannot ask stays silent (no waiting out).
            quick = kube.from_client(api_client, namespace, patience=0, request_timeout=(5, 5))
            quick.check_api()
            if queue:
                quick.check_queue(queue)
        except (kube.NoJobSetApi, kube.NoQueue) as err:
            return f"{err} ({where})"
        except Exception as err:  # noqa: BLE001 - 403, no answer: it cannot be asked
            _skipped(err, queue)
            return ""
        try:
            missing = missing_verbs(api_client, namespace, account)
        except Unknown as err:
            log.debug("RBAC pre-flight skipped: %s", err)
            return ""
    if not missing:
        return ""
    return (
        f"service account {namespace}/{account} may not {', '.join(missing)} ({where}), "
        "which the JobSet launcher needs: grant it with `make gke-rbac "
        f"NAMESPACE={namespace} SERVICE_ACCOUNT={account} EXECUTE=1`"
    )
