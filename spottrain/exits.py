"""The exit-code contract: one table, and the exceptions that end an attempt with a code.

Exit codes tell an orchestrator (KFP retry, Kubeflow's ExitCode restart policy,
Vertex's restart_job_on_worker_restart) whether another attempt can help:

* ``0``   success.
* ``64``  FATAL_CONFIG: bad input or a checkpoint dir holding an incompatible
  run. Retrying repeats it, so a marker in the checkpoint dir makes every
  retry of the same config exit at once.
* ``65``  FATAL_NAN: the loss became NaN/Inf; a retry would reach it again.
* ``143`` PREEMPTED: SIGTERM received, every worker saved at the same step.
* ``170`` PEER_LOST: a collective failed or timed out because a worker died.
* ``171`` HUNG: the watchdog saw no step finish in time.
* ``172`` UNAVAILABLE: a service the attempt needs could not be reached (Cloud
  Storage, the pretrained weights' download, the Kubernetes API): DNS, network,
  a 5xx. Permission and "no such bucket" errors are 64.

Retryable codes are all >= 128, which is what Kubeflow's ExitCode policy and
most shell conventions (128 + signal) already treat as "killed, try again".
"""

from __future__ import annotations

from dataclasses import dataclass

OK = 0
FATAL_CONFIG = 64
FATAL_NAN = 65
PREEMPTED = 143
PEER_LOST = 170
HUNG = 171
UNAVAILABLE = 172

# Codes from here up mean "another attempt may help" (128 + N: killed by signal N).
RETRYABLE_MIN = 128


@dataclass(frozen=True)
class ExitCode:
    """One row of the exit-code contract."""

    code: int
    outcome: str  # how the attempt ledger names an attempt that ended so
    meaning: str  # the one line the component logs for it
    retryable: bool


# The one table: the trainer's exits, the components' messages and the ledger's
# outcomes all read it (docs/preemption.md "Exit codes" is its prose).
EXIT_CODES = {
    row.code: row
    for row in (
        ExitCode(OK, "success", "success", False),
        ExitCode(
            FATAL_CONFIG,
            "fatal_config",
            "fatal configuration error (bad input or incompatible checkpoint; "
            "retrying is pointless)",
            False,
        ),
        ExitCode(FATAL_NAN, "nan", "fatal: the loss became NaN", False),
        ExitCode(PREEMPTED, "preempted", "preempted (SIGTERM) after a clean save: retryable", True),
        ExitCode(PEER_LOST, "worker_lost", "a peer worker was lost: retryable", True),
        ExitCode(HUNG, "hang", "hung (watchdog): retryable", True),
        ExitCode(
            UNAVAILABLE,
            "unavailable",
            "a service (storage, a download, the Kubernetes API) could not be reached: retryable",
            True,
        ),
    )
}
RETRYABLE = frozenset(c for c, row in EXIT_CODES.items() if row.retryable)
FATAL = frozenset(c for c, row in EXIT_CODES.items() if c and not row.retryable)


def is_retryable(code: int) -> bool:
    """True for exit codes another attempt may fix (anything killed by a signal too)."""
    return code in RETRYABLE or code >= RETRYABLE_MIN or code < 0


def describe(code: int) -> str:
    """A one-line meaning of an exit code (or of a negative Popen return code)."""
    if code in EXIT_CODES:
        return EXIT_CODES[code].meaning
    if code < 0:
        return f"killed by signal {-code}: retryable"
    return "retryable" if code >= RETRYABLE_MIN else "failed"


def outcome(code: int) -> str:
    """The attempt ledger's name for an attempt that exited with ``code``."""
    return EXIT_CODES[code].outcome if code in EXIT_CODES else f"exit_{code}"


class TrainerExit(Exception):
    """Raised to end training with a specific exit code and a one-line reason."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class ConfigError(TrainerExit):
    """A bad configuration or input: fatal, no retry can fix it."""

    def __init__(self, message: str):
        super().__init__(FATAL_CONFIG, message)


class FailedBefore(TrainerExit):
    """This config already failed fatally (``FATAL.json``, a previous attempt's or a peer's)."""


class Unwritable(TrainerExit):
    """A destination no retry can write until someone fixes it (full, read-only, denied).

    Fatal (64), but not recorded in FATAL.json: once fixed, the same config must
    run, and a retry before that stops at the up-front check of the dirs.
    """

    def __init__(self, message: str):
        super().__init__(FATAL_CONFIG, message)


class NotTheWriter(TrainerExit):
    """This attempt does not (or no longer) hold the checkpoint dir's lease.

    It ends without writing anything there: no FATAL.json, no ledger record
    (the dir belongs to the holder).
    """


class DirBusy(NotTheWriter):
    """Another run holds the checkpoint dir's lease; this one never trained.

    It adds only its own ``refused`` ledger record (merged, never overwriting).

    Args:
        since: When it began waiting for the lease (epoch seconds).
    """

    def __init__(self, code: int, message: str, since: float):
        super().__init__(code, message)
        self.since = since


def exit_code(returncode: int) -> int:
    """A child's exit code by the shell convention: killed by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode
