"""Stand-in for Argo's ``argoexec emissary``, PID 1 of a KFP task pod's main container.

Mirrors argoproj/argo-workflows at v4.0.5 (the version KFP 2.17.0 pins:
kubeflow/pipelines third_party/argo/VERSION, go.mod L10); the same lines at v3.6.19:

* workflow/controller/workflowpod.go L418-419: the container command becomes
  ``argoexec emissary -- <command>``, so the emissary is the container's PID 1.
* cmd/argoexec/commands/emissary.go L110-114 (``signal.Notify(signals)``: every
  signal) and L182-192: each signal but SIGCHLD/SIGURG is passed to
  ``osspecific.Kill(pid, sig)``, which is ``syscall.Kill(-pgid, sig)``
  (workflow/executor/osspecific/signal_darwin.go L15-25; signal_linux.go links it).
* osspecific/command_unix.go L29-39: the child starts with ``Setpgid`` (a group of its own).
* signal_darwin.go L31-60: ``Wait`` loops ``Wait4(-1, WNOHANG)``, returns only when
  the *direct child* is reaped, and sleeps one second after every other result
  (so one orphan zombie is reaped per second, each delaying the exit).
* same file: exit status, or ``128 + signal`` when the child was killed; emissary.go
  L245-253 passes it to ``os.Exit``.
* Nothing else is killed explicitly: when PID 1 exits, the kernel SIGKILLs the
  rest of the PID namespace (pid_namespaces(7)).

Usage: ``python argo_emissary.py [--hold-after-exit S] -- COMMAND ...``. The hold
is a test-only knob that keeps PID 1 alive S seconds after the child exits, to
isolate a second failure (a dead log pipe) from the cut-off.
"""

import os
import signal
import subprocess
import sys
import time


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
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1):
        signal.signal(sig, forward)
    while True:
        # signal_darwin.go Wait: Wait4(-1, &s, WNOHANG, nil), then time.Sleep(time.Second).
        try:
            wpid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return 1
        if wpid == child.pid:
            code = os.waitstatus_to_exitcode(status)
            _hold(hold)
            return 128 - code if code < 0 else code
        time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
