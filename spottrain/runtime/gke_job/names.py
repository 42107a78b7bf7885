"""Deterministic names for a launcher's Job and Service.

The name comes from the KFP run id and task name only, so a retry of the launcher's
own pod computes the same name and re-attaches instead of starting a second Job.
Both placeholders are resolved once by KFP's driver, before the retried executor pod
(kubeflow/pipelines 2.17.0 backend/src/v2/driver/resolve.go:440-443
`case "{{$.pipeline_job_uuid}}": ... opts.RunID` / `case "{{$.pipeline_task_name}}":
... opts.TaskName`; the retryStrategy sits on the executor template only:
backend/src/v2/compiler/argocompiler/container.go:583 `executor.RetryStrategy = ...`).
"""

from __future__ import annotations

import hashlib
import re

# Pod label selecting one gang (the Service's selector and the launcher's pod list).
GANG_LABEL = "spottrain.dev/gang"
MANAGED_BY = ("app.kubernetes.io/managed-by", "spottrain")
RUN_LABEL = "spottrain.dev/kfp-run"
CONTAINER = "trainer"
PORT_NAME = "grpc"
# The Job controller's annotation with a pod's index
# (https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode).
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
ON_DEMAND_SUFFIX = "-od"

_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]")


def job_name(run_id: str, task_name: str, *, on_demand: bool = False) -> str:
    """``st-<12 hex>`` (``-od`` for the on-demand Job): a DNS-1035 label.

    Short on purpose: the pod hostname is ``<job>-<index>`` and a hostname must be a
    DNS label (at most 63 characters); a Service name must be a DNS-1035 label.
    """
    if not run_id or not task_name:
        raise ValueError(f"run_id={run_id!r}, task_name={task_name!r}: both are needed")
    digest = hashlib.sha256(f"{run_id}/{task_name}".encode()).hexdigest()[:12]
    return f"st-{digest}" + (ON_DEMAND_SUFFIX if on_demand else "")


def label_value(text: str) -> str:
    """``text`` cut to a valid label value (63 characters, alphanumeric ends)."""
    return _LABEL_VALUE.sub("-", text)[:63].strip("-_.")
