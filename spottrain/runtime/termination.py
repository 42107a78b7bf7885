"""A fatal exit's mark in the container's termination message, for Argo's retry policy.

Through KFP's launcher every failure of a KFP pod exits 1 (``glog.Exit``,
kubeflow/pipelines 2.17.0 backend/src/v2/cmd/launcher-v2/main.go:56-60), so Argo's
``retryStrategy.expression`` cannot tell our fatal 64/65 from a crash by the code. The
kubelet reads the file at the container's ``terminationMessagePath`` (the default
``/dev/termination-log`` with policy ``File``: neither KFP's compiler nor Argo's pod
builder sets them) into ``state.terminated.message`` when the container ends, and Argo
appends that to the node's message (argo-workflows v4.0.5
workflow/controller/operator.go:1766-1769), which the ``preemption`` policy reads
(:data:`spottrain.pipelines.argo_retry.FATAL_MARK`).
"""

from __future__ import annotations

import os

from spottrain.trainer import preemption

# The kubelet's default path; the variable lets a test point it at a file of its own.
PATH_ENV = "SPOTTRAIN_TERMINATION_LOG"
DEFAULT_PATH = "/dev/termination-log"
# The kubelet keeps at most this much of the file (kubelet's maxContainerTerminationMessageLength).
MAX_BYTES = 4096
FATAL_MARK = "spottrain fatal exit"


def mark_fatal(code: int, line: str) -> bool:
    """Writes ``spottrain fatal exit <code>: <line>`` where the kubelet looks; True if written.

    Only for fatal codes, and only where the file exists: the kubelet creates and
    mounts it in a pod's containers; elsewhere (a laptop, kfp.local) nothing is created.
    """
    if code not in preemption.FATAL:
        return False
    path = os.environ.get(PATH_ENV, DEFAULT_PATH)
    text = f"{FATAL_MARK} {code}: {line}".encode()[:MAX_BYTES]
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)  # no O_CREAT: only the kubelet's file
    except OSError:
        return False
    try:
        os.write(fd, text)
    finally:
        os.close(fd)
    return True
