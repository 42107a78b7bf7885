"""An exit's mark in the container's termination message, for Argo's retry policy.

Through KFP's launcher every failure of a KFP pod exits 1 (``glog.Exit``,
kubeflow/pipelines 2.17.0 backend/src/v2/cmd/launcher-v2/main.go:56-60, after
``command.Run()`` returned the program's exit as an error, component/launcher_v2.go:715-716),
so Argo's ``retryStrategy.expression`` can tell neither our fatal 64/65 nor our
retryable 143 (a save on GCE's metadata notice, no SIGTERM yet) or 170-172 from a
crash by the code. The kubelet reads the file at the container's
``terminationMessagePath`` (the default ``/dev/termination-log`` with policy ``File``:
neither KFP's compiler nor Argo's pod builder sets them) into
``state.terminated.message`` when the container ends; Argo's emissary, PID 1, exits
with its child's code and writes the file only on an error of its own (argo-workflows
v4.0.5 cmd/argoexec/main.go:22-32); and Argo appends the message to the node's
message (workflow/controller/operator.go:1766-1769), which the ``preemption`` policy
reads (:data:`spottrain.pipelines.argo_retry.FATAL_MARK`, ``RETRYABLE_MARK``).
"""

from __future__ import annotations

import os

from spottrain import exits

# The kubelet's default path; the variable lets a test point it at a file of its own.
PATH_ENV = "SPOTTRAIN_TERMINATION_LOG"
DEFAULT_PATH = "/dev/termination-log"
# The kubelet keeps at most this much of the file (kubelet's maxContainerTerminationMessageLength).
MAX_BYTES = 4096
FATAL_MARK = "spottrain fatal exit"
RETRYABLE_MARK = "spottrain retryable exit"


def mark_text(code: int, line: str) -> str:
    """The mark for an exit: fatal (64, 65), retryable (143, 170-172) or ``""`` (0, a crash).

    ``spottrain fatal exit <code>: <line>`` or ``spottrain retryable exit <code>: <line>``.
    """
    if code in exits.FATAL:
        return f"{FATAL_MARK} {code}: {line}"
    if code in exits.RETRYABLE:
        return f"{RETRYABLE_MARK} {code}: {line}"
    return ""


def mark_exit(code: int, line: str) -> bool:
    """Writes :func:`mark_text` where the kubelet looks; True if written.

    Only for the exit-code contract's fatal and retryable codes, and only where the
    file exists: the kubelet creates and mounts it in a pod's containers; elsewhere (a
    laptop, kfp.local) nothing is created.
    """
    text = mark_text(code, line)
    if not text:
        return False
    path = os.environ.get(PATH_ENV, DEFAULT_PATH)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)  # no O_CREAT: only the kubelet's file
    except OSError:
        return False
    try:
        os.write(fd, text.encode()[:MAX_BYTES])
    finally:
        os.close(fd)
    return True
