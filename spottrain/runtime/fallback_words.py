"""The one vocabulary of the on-demand fall-backs, in code, logs, outputs and docs.

What a checkpoint dir says (the ``training_status`` component's output) and what a
fall-back decides from it (the ``fallback_decision`` component's output on GKE, the
Vertex launcher's verdict after each job, ``spottrain.runtime.vertex_job``) are spoken
in these words only; the pipelines' ``dsl.If`` conditions compare with them too.
"""

# How far the run in a checkpoint dir got (training_status); also endings of a fall-back.
COMPLETED = "completed"  # the newest checkpoint is at train_steps: nothing left to do
INCOMPLETE = "incomplete"  # short of train_steps, no FATAL.json: a resume can finish it
FATAL = "fatal"  # the trainer left FATAL.json: any retry, on any VM, fails the same way
STATUSES = (COMPLETED, INCOMPLETE, FATAL)

# What a fall-back decides: train on (GKE: on the on-demand pool; Vertex: a next job,
# logged as "resume on <strategy>"), or end with a status, or stop for the user.
RESUME = "resume"
CANCELLED = "cancelled"  # someone cancelled the run or the job: their wish, not a failure
DECISIONS = (RESUME, COMPLETED, FATAL, CANCELLED)


def settled(progress: str, cancelled: bool) -> str | None:
    """The ending both fall-backs reach before any capacity is chosen; ``None``: none.

    The checkpoint dir decides first: a run at ``train_steps`` is complete and one that
    left FATAL.json fails on any VM, so neither pays for on-demand. Then a user's
    cancel is honoured. GKE's ``fallback_decision`` resumes otherwise; the Vertex
    launcher chooses the next job's strategy.

    Args:
        progress: One of :data:`STATUSES` (``training_status`` of the checkpoint dir).
        cancelled: Someone cancelled the run or the job.
    """
    if progress == COMPLETED:
        return COMPLETED
    if progress == FATAL:
        return FATAL
    if cancelled:
        return CANCELLED
    return None
