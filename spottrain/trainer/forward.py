"""``python -m spottrain.trainer.forward -- CMD ...``: a PID 1 that passes the preemption notice on.

Vertex AI runs a custom job's worker-pool command as the container's main
process and sends it SIGTERM on a preemption. For a KFP lightweight component
that command is ``sh -ec '… python3 -m kfp.dsl.executor_main …'`` (kfp's
``component_factory``), so the shell is PID 1: the kernel drops every signal
PID 1 has no handler for, and dash does not exec its last command, so the
trainer below never hears the notice and is killed at the end of the grace
period with everything since its last save.

The pools run ``tini -- python3 -m spottrain.trainer.forward -- CMD``: tini is PID 1 from
the container's first instructions (Python needs ~20-100 ms to have a handler, and
the kernel drops what PID 1 neither handles nor blocks), and this process, its
child (or PID 1 itself where tini is missing):

* starts CMD in a process group of its own with SIGTERM and SIGINT *ignored*:
  a shell cannot un-ignore a signal that was ignored when it started (POSIX
  ``trap``), so it cannot die of the notice and orphan the trainer, while Python
  processes that install handlers (the hang supervisor, the trainer) receive it;
  tini alone cannot do this: it starts its child with the signals at their
  defaults, so the shell would die and take the trainer with it;
* forwards SIGTERM/SIGINT to that whole process group, and, while no process in
  the group has a handler for it yet, repeats it every ``REPEAT_SECONDS`` until
  one does (then once more, and no more): the processes in front of the hang
  supervisor (the shell, kfp's executor) inherit the ignored signal, so a notice
  that arrives before the supervisor has its handler (the seconds kfp's executor
  takes to start) would otherwise be lost;
* reaps orphaned descendants, as PID 1 must;
* exits with CMD's exit code (128 + N when a signal N killed it), so the
  trainer's 143 "preempted after a clean save" reaches Vertex and KFP unchanged.

No TensorFlow, no third-party imports: it starts in milliseconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

FORWARDED = (signal.SIGTERM, signal.SIGINT)
USAGE_ERROR = 2
# How often a notice is sent again while CMD runs (see the module docstring).
REPEAT_SECONDS = 0.5


def _ignore_notice_signals() -> None:
    """``preexec_fn``: the command starts with the notice signals ignored."""
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_IGN)


def _catches(pgid: int, signum: int) -> bool | None:
    """Whether a process of group ``pgid`` has a handler for ``signum`` (``/proc``).

    ``None`` when ``/proc`` cannot tell (then the notice is repeated until CMD ends).
    """
    bit = 1 << (signum - 1)
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[2]) != pgid:  # field 5: pgrp
                    continue
            with open(f"/proc/{pid}/status") as f:
                caught = next(ln for ln in f if ln.startswith("SigCgt:"))
        except (OSError, ValueError, IndexError, StopIteration):
            continue  # gone meanwhile
        if int(caught.split()[1], 16) & bit:
            return True
    return False


def run(cmd: list[str]) -> int:
    """Runs ``cmd`` as described in the module docstring; returns its exit code."""
    child = subprocess.Popen(cmd, preexec_fn=_ignore_notice_signals, start_new_session=True)
    notice: list[int] = []
    heard, done = threading.Event(), threading.Event()

    def send(signum: int) -> None:
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:  # the group is gone already
            pass

    def forward(signum, _frame):
        first = not notice
        notice[:] = [signum]
        caught = _catches(child.pid, signum)  # before sending: see repeat()
        send(signum)
        if first and caught is not True:
            heard.set()

    def repeat() -> None:
        heard.wait()
        while not done.wait(REPEAT_SECONDS):
            # Checked before each send: a handler that exists now gets this one.
            caught = _catches(child.pid, notice[0])
            send(notice[0])
            if caught:
                return

    for sig in FORWARDED:
        signal.signal(sig, forward)
    threading.Thread(target=repeat, name="notice-repeat", daemon=True).start()
    try:
        while True:
            # Any child: orphans re-parented to PID 1 are reaped here too.
            pid, status = os.wait()
            if pid == child.pid:
                child.returncode = code = os.waitstatus_to_exitcode(status)
                return 128 - code if code < 0 else code
    finally:
        done.set()


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m spottrain.trainer.forward -- CMD [ARGS...]``."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m spottrain.trainer.forward -- CMD [ARGS...]", file=sys.stderr)
        return USAGE_ERROR
    try:
        return run(args)
    except OSError as e:
        print(f"spottrain.trainer.forward: cannot run {args[0]!r}: {e.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
