"""Deterministic names for a launcher's JobSets, and the labels and container name.

The name comes from the KFP run id and task name only, so a retry of the launcher's
own pod computes the same name and re-attaches instead of starting a second JobSet.
Both placeholders are resolved once by KFP's driver, before the retried executor pod
(kubeflow/pipelines 2.17.0 backend/src/v2/driver/resolve.go:440-443
`case "{{$.pipeline_job_uuid}}": ... opts.RunID` / `case "{{$.pipeline_task_name}}":
... opts.TaskName`; the retryStrategy sits on the executor template only:
backend/src/v2/compiler/argocompiler/container.go:583 `executor.RetryStrategy = ...`).
"""

from __future__ import annotations

import hashlib
import re

from spottrain.ledger import bill_labels

MANAGED_BY = ("app.kubernetes.io/managed-by", "spottrain")
# The KFP run id: what makes a JobSet this run's, and the bill's join key (bill_labels).
RUN_LABEL = bill_labels.K8S_RUN
CONTAINER = "trainer"
PORT_NAME = "grpc"
# The Job controller's annotation with a pod's index
# (https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode).
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
ON_DEMAND_SUFFIX = "-od"


def jobset_name(run_id: str, task_name: str, *, on_demand: bool = False) -> str:
    """``st-<12 hex>`` (``-od`` for the on-demand JobSet): a DNS-1035 label.

    Short on purpose: a pod's name is ``<jobset>-workers-0-<index>-<5 chars>`` and must
    be a DNS-1035 label (at most 63 characters; ``jobset.WorkerSet`` checks).
    """
    if not run_id or not task_name:
        raise ValueError(f"run_id={run_id!r}, task_name={task_name!r}: both are needed")
    digest = hashlib.sha256(f"{run_id}/{task_name}".encode()).hexdigest()[:12]
    return f"st-{digest}" + (ON_DEMAND_SUFFIX if on_demand else "")


def gang_name(first: str, k: int) -> str:
    """The JobSet name of a run's gang ``k`` (0: ``first``, the spot gang).

    A move makes a gang of its own: 1 is the on-demand one (``first-od``); a move back
    to spot (issue 56) makes 2 (``first-2``), the next to on-demand 3 (``first-3-od``),
    and so on: the even gangs on spot, the odd ones on-demand. Each gang its own name,
    so a gang's pods and the ledger's ``<jobset>/<restart>`` never mix two of them.
    """
    if k < 0:
        raise ValueError(f"gang {k}: expected 0 or more")
    if k < 2:
        return first + (ON_DEMAND_SUFFIX if k else "")
    return f"{first}-{k}" + (ON_DEMAND_SUFFIX if k % 2 else "")


def gang_number(first: str, name: str) -> int | None:
    """The ``k`` whose :func:`gang_name` is ``name`` (``None``: no gang of ``first``'s)."""
    found = re.fullmatch(re.escape(first) + rf"(?:-(\d+))?({re.escape(ON_DEMAND_SUFFIX)})?", name)
    if found is None:
        return None
    k = int(found[1]) if found[1] is not None else int(bool(found[2]))
    return k if gang_name(first, k) == name else None
