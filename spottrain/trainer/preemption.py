"""Signals and the shared stop flag: the notice, and how a process ends.

The exit codes an attempt ends with are :mod:`spottrain.exits`'s table.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading

_PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h)

# The notice: a preemption's SIGTERM, or Ctrl-C on a developer's machine.
NOTICE_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


log = logging.getLogger(__name__)


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
