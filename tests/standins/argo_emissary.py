"""Stand-in for Argo's ``argoexec emissary``, PID 1 of a KFP task pod's main container.

Mirrors argoproj/argo-workflows at v4.0.5 (the version KFP 2.17.0 pins:
kubeflow/pipelines third_party/argo/VERSION, go.mod L10). tests/system/kfp/test_platform_kfp_argo.py
runs the real ``argoexec`` instead when ``make argoexec`` built it; what follows was
checked against that binary (lines at v4.0.5):

* workflow/controller/workflowpod.go L435-436: the container command becomes
  ``/var/run/argo/argoexec emissary --loglevel … --log-format … --gloglevel … --
  <command>``, so the emissary is the container's PID 1.
* cmd/argoexec/commands/emissary.go L110-114 (``signal.Notify(signals)``: every
  catchable signal) and L182-192: each one but SIGCHLD/SIGURG is passed to
  ``osspecific.Kill(pid, sig)``, which is ``syscall.Kill(-pgid, sig)``
  (workflow/executor/osspecific/signal_darwin.go L15-25; upstream's
  signal_linux.go is a symlink to it, which the module zip drops: see the Makefile).
  So is this stand-in: a SIGUSR2 reaches a trap in the child through both.
* osspecific/command_unix.go L29-39: the child starts with ``Setpgid`` (a group of
  its own), its stdin /dev/null here (a terminal would get it a pty instead).
* signal_darwin.go L31-60: ``Wait`` loops ``Wait4(-1, WNOHANG)``, returns only when
  the *direct child* is reaped, and sleeps one second after every other result, so
  orphan zombies are reaped one per second. Which zombie ``Wait4(-1)`` returns first
  is the kernel's choice. This single-threaded stand-in always gets its child first,
  so orphans never delay its exit; the Go binary sometimes reaps an orphan first (5
  orphan zombies pending when the child died: it exited at the next poll in 4 runs
  of 6, one poll later in 2). The stand-in is thus the fast end of argoexec: the
  trainer's save window is never longer here than there.
* same file: exit status, or ``128 + signal`` when the child was killed; emissary.go
  L245-253 and cmd/argoexec/main.go pass it to ``os.Exit``. If nothing is left to
  wait for (ECHILD), argoexec exits 64 (main.go), and so does this stand-in.
* Not modelled: argoexec's own log lines and cobra's ``Error: exit status N`` on
  stderr; ``/var/run/argo/ctr/main/exitcode`` (emissary.go L49-54); the
  ``ctr/main/signal`` file the wait container writes (cmd/argoexec/commands/signal.go,
  polled every 2 s, and no longer after a SIGTERM: main.go's
  ``signal.NotifyContext(SIGTERM)`` cancels the poller's context).
* Nothing else is killed explicitly: when PID 1 exits, the kernel SIGKILLs the
  rest of the PID namespace (pid_namespaces(7)).

Usage: ``python argo_emissary.py [--hold-after-exit S] -- COMMAND ...``. The hold
is a test-only knob that keeps PID 1 alive S seconds after the child exits, to
isolate a second failure (a dead log pipe) from the cut-off; it reaps meanwhile.
Argo's own is ``ARGO_DEBUG_PAUSE_AFTER=true`` (emissary.go L232-243: wait for
``ctr/main/after``), which does not reap: the test uses that with argoexec.
"""

import os
import signal
import subprocess
import sys
import time

# emissary.go: CanIgnoreSignal skips these; SIGKILL and SIGSTOP cannot be caught.
_NOT_FORWARDED = {signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD, signal.SIGURG}


def _hold(seconds):
    """Test-only: stay PID 1 until the namespace is otherwise empty, at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        if [p for p in os.listdir("/proc") if p.isdigit()] == [str(os.getpid())]:
            return
        time.sleep(0.1)


def main(argv):
    hold = 0.0
    if argv[:1] == ["--hold-after-exit"]:
        hold, argv = float(argv[1]), argv[2:]
    assert argv[:1] == ["--"], "usage: argo_emissary.py [--hold-after-exit S] -- COMMAND ..."
    # command_unix.go: Setpgid, so the launcher leads a process group of its own.
    child = subprocess.Popen(argv[1:], preexec_fn=lambda: os.setpgid(0, 0))
    pgid = child.pid

    def forward(signum, _frame):
        # signal_darwin.go Kill: syscall.Kill(-pgid, s).
        try:
            os.killpg(pgid, signum)
        except ProcessLookupError:
            pass

    # emissary.go: signal.Notify(signals) catches everything; CanIgnoreSignal skips SIGCHLD/SIGURG.
    for sig in signal.valid_signals():
        if sig in _NOT_FORWARDED:
            continue
        try:
            signal.signal(sig, forward)
        except (OSError, ValueError):
            pass  # glibc keeps 32 and 33 for itself
    while True:
        # signal_darwin.go Wait: Wait4(-1, &s, WNOHANG, nil), then time.Sleep(time.Second).
        try:
            wpid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return 64
        if wpid == child.pid:
            code = os.waitstatus_to_exitcode(status)
            _hold(hold)
            return 128 - code if code < 0 else code
        time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
