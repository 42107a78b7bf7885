"""Signals, the shared stop flag and the exit-code contract.

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

import ctypes
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass

OK = 0
FATAL_CONFIG = 64
FATAL_NAN = 65
PREEMPTED = 143
PEER_LOST = 170
HUNG = 171
UNAVAILABLE = 172

_PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h)

# Codes from here up mean "another attempt may help" (128 + N: killed by signal N).
RETRYABLE_MIN = 128

# The notice: a preemption's SIGTERM, or Ctrl-C on a developer's machine.
NOTICE_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


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

log = logging.getLogger(__name__)


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


class StopFlag:
    """Set by SIGTERM/SIGINT; read once per step and all-reduced across workers.

    The flag is only *local* intent: train_lib all-reduces it every step so that
    every worker stops (and saves) at the same step, even though only one node
    may have been told it is about to be preempted.

    Why not ``tf.distribute.experimental.PreemptionCheckpointHandler``: on TF 2.21 it
    does work around a custom 2-worker MWMS loop (tried: SIGTERM to worker 1, both
    saved at step 535 and exited), but (a) it agrees on the step through the
    coordination service's key-value store (``failure_handling.py``: the first
    worker to hear sets ``TERMINATED_WORKER``, the rest watch a key for the step to
    save at), where our vote rides on the all-reduce every step already does
    (``[loss, stop, save]``), which also carries the chief's time-based save vote;
    (b) it saves only on a notice, through a ``CheckpointManager(max_to_keep=1)`` of
    its own (:661), which would prune the periodic and asynchronous saves kept in
    the same folder; (c) it ends the process in its ``exit_fn`` (``sys.exit(42)``
    off GCE, :224) right after its save, before the attempt's ledger can record the
    notice beside the save and close the record with our exit code (143).
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._repeats = 0
        self._installed: str | None = None
        self.signal_name: str | None = None
        # Called with the reason at the first request: the trainer records the notice
        # and says what it does with it where it is (train_lib.Trainer._noted).
        self.on_set = None

    def set(self, reason: str) -> None:
        """Requests a stop (from any thread); the first request calls ``on_set``."""
        with self._lock:
            first = not self._event.is_set()
            self.signal_name = reason
            self._event.set()
        if not first:
            return
        if self.on_set is not None:
            self.on_set(reason)
        else:
            log.warning(
                "%s received before training began: the attempt ends as soon as its "
                "record is open (nothing to save)",
                reason,
            )

    def is_set(self) -> bool:
        """Whether a stop was requested locally."""
        return self._event.is_set()

    def install(self, *, first: bool = False) -> None:
        """Takes SIGTERM/SIGINT for this flag from now on.

        Args:
            first: This is the trainer process's first line, before any other thread
                starts (``spottrain.trainer.task``): the signals are blocked in every
                thread, which inherit the mask, and a thread of ours takes them with
                ``sigwait``. Otherwise (after the strategy is created: the trainer's
                second call, or a trainer built inside another program such as the
                profile component) Python handlers are installed, taken over from
                the strategy's, and the signals unblocked in the calling thread.

        Why block first: MultiWorkerMirroredStrategy's start-up installs a C++ SIGTERM
        handler of its own (TensorFlow's ``sigterm`` preemption notifier), which takes
        the signal and does nothing the trainer sees: a notice while the gang formed
        was lost, and the attempt trained on until the platform killed it. A blocked
        signal reaches no handler, whoever installs one; it waits for ``sigwait``.
        Why unblock after: a blocked signal is inherited by every process started
        later, and a task's data-loading workers whose pool ends them with SIGTERM
        would then never end. Either way a thread of ours sets the flag (through
        ``signal.set_wakeup_fd`` for a handler): a Python handler alone runs only when
        the main thread is back in Python bytecode, after the training step it is in
        (in a KFP pod the kill comes about a second after the SIGTERM).
        """
        for signum in NOTICE_SIGNALS:
            # PID 1 (a container's main process) is sent only what it handles.
            signal.signal(signum, _no_op)
        if first:
            signal.pthread_sigmask(signal.SIG_BLOCK, NOTICE_SIGNALS)
            self._installed = "sigwait"
            target, args = self._take, ()
        else:
            read_fd, write_fd = os.pipe()
            os.set_blocking(write_fd, False)
            signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
            if self._installed == "sigwait":
                # Handler and wakeup pipe first: a notice pending now is delivered at once.
                signal.pthread_sigmask(signal.SIG_UNBLOCK, NOTICE_SIGNALS)
            self._installed = "handler"
            target, args = self._read, (read_fd,)
        threading.Thread(target=target, args=args, name="spottrain-notice", daemon=True).start()

    def _take(self) -> None:
        while True:
            self._heard(signal.sigwait(NOTICE_SIGNALS))

    def _read(self, read_fd: int) -> None:
        while True:
            for signum in os.read(read_fd, 64):
                if signum in NOTICE_SIGNALS:
                    self._heard(signum)

    def _heard(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self.is_set():
            # spottrain.trainer.forward repeats a notice until the attempt ends: say it once.
            self._repeats += 1
            if self._repeats == 1:
                log.warning("%s again: the first notice is being acted on", name)
            return
        self.set(name)


def _no_op(_signum, _frame) -> None:
    """The Python-level handler: the flag is set by the notice thread."""


def exit_process(code: int) -> None:
    """Exits with ``code`` (for ``__main__`` blocks), skipping interpreter shutdown.

    After a failure MWMS's coordination service would wait at its shutdown barrier
    for peers that are gone. After success, freeing the training iterator waits for
    tf.data's autotuning thread (``RootDataset::Iterator``'s ``tf_data_model``
    thread, tensorflow/core/data/root_dataset.cc), which was seen to take up to
    ~60 s (its optimisation period's cap): 7 of 8 completed 3-worker runs idled
    ~40 s after their last save. The trainer passes a barrier with its peers
    before it returns (``Trainer.finish``), so none of them still needs this one.
    """
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def exit_code(returncode: int) -> int:
    """A child's exit code by the shell convention: killed by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """``preexec_fn`` for worker processes: signal the child when its parent dies.

    Killing a launcher or supervisor (a node lost, a deleted pod) must not leave
    trainers behind that hold GPUs or race a retry on the checkpoint dir. Linux
    sends ``sig`` when the *thread* that forked exits. Pass another signal with
    ``functools.partial`` (e.g. SIGTERM for a server that should shut down cleanly).
    """
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    except OSError:  # not Linux: the parent's own cleanup still applies
        pass
