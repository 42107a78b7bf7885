"""The train_job JobSet manifests' children, and their validation as Kubernetes objects."""

from __future__ import annotations

import kubernetes_validate


def child(manifest: dict) -> dict:
    (rjob,) = manifest["spec"]["replicatedJobs"]
    return rjob["template"]["spec"]


def child_job(manifest: dict) -> dict:
    """The JobSet's child Job as the ``batch/v1`` Job the JobSet controller creates."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
            "spec": child(manifest)}  # fmt: skip


def validate(manifest: dict) -> None:
    """Kubernetes' own OpenAPI schema, strictly (an unknown field is an error)."""
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


# GKE's regular channel runs 1.33-1.34 (late 2026); podReplacementPolicy is GA in 1.34.
K8S_VERSION = "1.34.0"
