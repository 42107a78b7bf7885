"""Hang watchdog: a stuck job prints nothing and burns money, so make it speak and stop.

``python -m spottrain.trainer.task`` runs as a small supervisor process with the real
trainer as its child. The child reports every finished step over a pipe; when
none arrives within ``--hang-timeout`` seconds (``--startup-timeout`` before the
first step, which also covers a peer that never arrives while MWMS waits
forever), the supervisor dumps every thread's Python stack of the child,
writes it to the log and beside the checkpoints, kills the child and exits
with HUNG (171), so the orchestrator retries instead of paying for an idle GPU.

Why a separate process: a hung TensorFlow call often holds the GIL (MWMS
start-up does), which starves any watchdog *thread* in the same process.
``py-spy dump`` reads the child's memory from outside; a parent may trace its
own child without extra privileges, though some clusters still need
``SYS_PTRACE`` in the pod's securityContext. If py-spy fails, the child's
``faulthandler`` (registered on SIGUSR1, it runs without the GIL) dumps instead.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from spottrain import diagnostics
from spottrain.exits import HUNG, PREEMPTED, exit_code
from spottrain.ledger import STARTED_ENV
from spottrain.trainer.heartbeat import (
    FAULTHANDLER_FILE_ENV,
    HEARTBEAT_FD_ENV,
    PROGRESS_FD_ENV,
)
from spottrain.trainer.preemption import NOTICE_SIGNALS, die_with_parent

log = logging.getLogger(__name__)

# How long a trainer that took no step yet has to act on a notice passed on to it:
# it ends at once by itself (notice_phase), in milliseconds, unless TensorFlow holds
# Python's lock (MWMS's start-up does while the gang forms: no thread of the trainer's
# runs then); then its supervisor ends it (Supervisor.stopped_for_notice).
NOTICE_ACK_S = 3.0

# The protocol's names are the trainer side's (heartbeat.py); this is the supervisor's.
_RELAYED = (b"start", b"step", b"dump")


def py_spy_dump(pid: int, timeout_s: float = 30.0) -> str | None:
    """Every thread's Python stack of ``pid`` via py-spy, or None when it cannot.

    The first try pauses the process for a consistent snapshot; a process that
    is already stopped (SIGSTOP, a frozen container) refuses that, so the second
    try reads its memory without pausing it.
    """
    exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(exe):
        return None
    last = "no output"
    for extra in ([], ["--nonblocking"]):
        try:
            proc = subprocess.run(
                [exe, "dump", *extra, "--pid", str(pid)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            last = str(e)
            continue
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout
        errors = [ln for ln in (proc.stderr or proc.stdout).splitlines() if "Error" in ln]
        last = errors[0] if errors else "no output"
    log.warning("py-spy dump failed: %s (needs ptrace; SYS_PTRACE on Kubernetes)", last)
    return None


class NoticeRelay:
    """The supervisor's SIGTERM/SIGINT handler: passes the notice on to the trainer.

    As a container's main process (``python -m spottrain.trainer.task`` in a JobSet pod)
    the supervisor is PID 1, and the kernel delivers to PID 1 only the signals
    it has a handler for: the rest are dropped, not defaulted (signal(7),
    pid_namespaces(7)). So ``spottrain.trainer.task`` installs this first thing, before
    its checks and imports: a notice that arrives before the trainer exists is
    held (the supervisor then exits without starting it), one that arrives
    while it starts is passed on as soon as it does.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.child: subprocess.Popen | None = None
        self.held: int | None = None
        self._old: dict = {}
        # Called with the signal's name when the first notice is passed on.
        self.on_forward = None

    def install(self) -> NoticeRelay:
        """Installs the handler; returns self."""
        self._old = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def restore(self) -> None:
        """Puts the previous handlers back."""
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old = {}

    def attach(self, child: subprocess.Popen) -> None:
        """Forwards from now on to ``child``, and the notice held so far, if any."""
        self.child = child
        if self.held is not None:
            self._send(self.held)

    def _handle(self, signum, _frame) -> None:
        # A preemption notice is for the trainer: it saves, then exits 143.
        if self.child is None:
            self.held = self.held or signum
        else:
            self._send(signum)
            if self.on_forward is not None:
                note, self.on_forward = self.on_forward, None
                note(signal.Signals(signum).name)

    def _send(self, signum: int) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)


def reap_orphans(keep: int) -> None:
    """Reaps exited children other than ``keep``, without touching ``keep``.

    A container's PID 1 inherits every orphaned process of its PID namespace
    and must reap them, or they stay zombies. ``keep`` (the trainer) is left
    for its ``Popen``, which must read its exit status itself.
    """
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # no children at all
            return
        if info is None or info.si_pid == keep:
            return
        try:
            os.waitpid(info.si_pid, 0)
        except ChildProcessError:  # reaped meanwhile by its own waiter
            pass


def _trainer_setup() -> None:
    """``preexec_fn`` of the trainer: it dies with this process, notice blocked.

    The trainer takes the notice with ``sigwait`` from its first lines
    (``StopFlag.install``); blocked from its start, one that comes while Python
    starts waits for that instead of killing it by the default action, unrecorded.
    """
    die_with_parent()
    signal.pthread_sigmask(signal.SIG_BLOCK, NOTICE_SIGNALS)


class Supervisor:
    """Runs the trainer as a child process and watches its heartbeat."""

    def __init__(
        self, cmd: list[str], hang_timeout_s: float, startup_timeout_s: float, name: str = "trainer"
    ):
        self.cmd = cmd
        self.hang_timeout_s = hang_timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.name = name
        self.step: int | None = None
        self.dump_path: str | None = None
        self.fired_after: float | None = None
        self.started = time.time()
        self.progress_fd = int(os.environ.get(PROGRESS_FD_ENV, "-1"))
        # The notice passed on to the trainer: (signal name, when), and what the
        # trainer said of it and of where it is (heartbeat's "heard", "doing").
        self.notice: tuple[str, float] | None = None
        self.heard = False
        self.doing = "while TensorFlow and the task started"
        # Set when this supervisor ended an attempt that could not act on a notice.
        self.stopped_for_notice: str | None = None

    def noticed(self, reason: str) -> None:
        """The notice was passed on to the trainer (the relay's first forward)."""
        self.notice = (reason, time.monotonic())

    def run(self, relay: NoticeRelay | None = None) -> int:
        """Starts the child, forwards signals, returns its exit code (or HUNG).

        Args:
            relay: The notice handler already installed by the caller (see
                :class:`NoticeRelay`); one is installed here when None, and
                restored on return. A caller's relay stays installed: the
                caller exits right after, and a notice in between (a launcher
                stopping the gang) must not kill this process by the default
                action and turn the trainer's 64 into a retryable 143.
        """
        own = relay is None
        relay = relay or NoticeRelay().install()
        also = relay.on_forward

        def forwarded(reason: str) -> None:
            self.noticed(reason)
            if also is not None:
                also(reason)

        relay.on_forward = forwarded
        if relay.held is not None:
            # The notice came before the trainer existed: nothing to save, and
            # starting a trainer only to stop it would delay the pod's exit.
            code = exit_code(-relay.held)
            log.warning(
                "%s before the trainer started: exiting %d, nothing to save",
                signal.Signals(relay.held).name,
                code,
            )
            if own:
                relay.restore()
            return code
        read_fd, write_fd = os.pipe()
        fault_file = tempfile.NamedTemporaryFile(
            prefix="spottrain-faulthandler-", suffix=".txt", delete=False
        )
        fault_file.close()
        env = dict(os.environ)
        env[HEARTBEAT_FD_ENV] = str(write_fd)
        env[FAULTHANDLER_FILE_ENV] = fault_file.name
        env[STARTED_ENV] = repr(self.started)
        child = subprocess.Popen(self.cmd, env=env, pass_fds=(write_fd,), preexec_fn=_trainer_setup)
        os.close(write_fd)
        # A notice that arrived while the child was being started is passed on now.
        relay.attach(child)
        try:
            return self._watch(child, read_fd, fault_file.name)
        finally:
            if own:
                relay.restore()
            if child.poll() is None:
                child.kill()
                child.wait()
            os.close(read_fd)
            os.unlink(fault_file.name)

    def _watch(self, child: subprocess.Popen, read_fd: int, fault_path: str) -> int:
        last_beat = time.monotonic()
        watching, saving, buf, eof = True, False, b"", False
        while True:
            if not eof:
                ready, _, _ = select.select([read_fd], [], [], 0.5)
                if ready:
                    chunk = os.read(read_fd, 65536)
                    eof = not chunk
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    self._relay(lines)
                    for line in lines:
                        kind, _, value = line.decode(errors="replace").partition(" ")
                        if kind == "step":
                            self.step, last_beat = int(value), time.monotonic()
                            saving = False
                        elif kind == "save":
                            saving, last_beat = True, time.monotonic()
                        elif kind == "dump":
                            self.dump_path = value
                        elif kind == "done":
                            watching = False
                        elif kind == "heard":
                            self.heard = True
                        elif kind == "doing":
                            self.doing = value
            else:
                time.sleep(0.2)
            reap_orphans(keep=child.pid)
            if child.poll() is not None:
                return exit_code(child.returncode)
            if self._cannot_act(watching):
                return self._stop_for_notice(child)
            limit = self.startup_timeout_s if self.step is None else self.hang_timeout_s
            if saving:
                limit = max(limit, self.startup_timeout_s)
            idle = time.monotonic() - last_beat
            if watching and idle >= limit:
                self.fired_after = idle
                self._fire(child, idle, fault_path)
                return HUNG

    def _cannot_act(self, watching: bool) -> bool:
        """A trainer that took no step did not act on a notice in NOTICE_ACK_S."""
        return (
            self.notice is not None
            and not self.heard
            and self.step is None
            and watching
            and time.monotonic() - self.notice[1] >= NOTICE_ACK_S
        )

    def _stop_for_notice(self, child: subprocess.Popen) -> int:
        """Ends an attempt that trained nothing and is stuck where it cannot act: 143."""
        self.stopped_for_notice = (
            f"preempted ({self.notice[0]}) {self.doing}: the trainer did not end by itself within "
            f"{NOTICE_ACK_S:g} s, so its supervisor stopped it; nothing trained, nothing "
            "to save, 0 steps lost"
        )
        child.kill()
        child.wait()
        log.warning("exit %d: %s", PREEMPTED, self.stopped_for_notice)
        return PREEMPTED

    def _relay(self, lines: list[bytes]) -> None:
        """Passes progress lines on to the launcher's fd, when there is one."""
        if self.progress_fd < 0:
            return
        out = b"".join(ln + b"\n" for ln in lines if ln.split(b" ", 1)[0] in _RELAYED)
        if out:
            try:
                os.write(self.progress_fd, out)
            except OSError:  # the launcher is gone: nobody to tell
                self.progress_fd = -1

    def _fire(self, child: subprocess.Popen, idle: float, fault_path: str) -> None:
        where = "before the first step" if self.step is None else f"after step {self.step}"
        header = (
            f"HANG: no training step finished for {idle:.0f} s ({where}) on "
            f"{self.name}, trainer pid {child.pid}"
        )
        log.error(header)
        text, tool = py_spy_dump(child.pid), "py-spy"
        if text is None:
            tool = "faulthandler"
            child.send_signal(signal.SIGUSR1)
            time.sleep(2.0)
            with open(fault_path) as f:
                text = f.read() or "(no stack dump could be taken)"
        child.kill()
        child.wait()
        write_report(f"{header}\nstacks ({tool}):\n{text}", self.dump_path)


def write_report(report: str, dump_path: str | None) -> None:
    """Prints a hang report and writes it to ``dump_path`` (beside the checkpoints)."""
    print(report, flush=True)
    if not dump_path:
        return
    try:
        from spottrain import fileio

        fileio.write_text(dump_path, report)
        log.error("stack dump written to %s; the hung process exits %d", dump_path, HUNG)
    except Exception as e:  # noqa: BLE001 - exiting matters more than the file
        log.error("could not write %s: %s", dump_path, e)


def write_notice(checkpoint_dir: str, name: str, reason: str) -> None:
    """Notes a notice in ``diagnostics/`` (a local or mounted dir: no TensorFlow here).

    The trainer records a notice in the ledger when it comes, from a thread
    (``StopFlag.install``); if the platform kills it before that write lands (a KFP
    pod's second on a loaded node), this file is what tells the next attempt that
    this one was preempted, not killed.
    """
    path = diagnostics.path(checkpoint_dir, diagnostics.NOTICE, name, f"{time.time():.3f}")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(f"{reason}\n")
    except OSError as e:
        log.warning("could not note the notice in %s: %s", path, e)


def stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped (SIGSTOP): /proc's state letter ``T`` (``t`` traced).

    A stopped process never handles SIGTERM and never exits by itself. A cgroup
    freezer's tasks (a paused container) show as sleeping instead, so callers still
    need a deadline for those.
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def should_supervise(trainer_argv: list[str]) -> bool:
    """Whether this process should become the supervisor (not already the child)."""
    return (
        HEARTBEAT_FD_ENV not in os.environ
        and "--no-supervisor" not in trainer_argv
        and "--check"
        not in trainer_argv  # nothing to watch: spottrain.trainer.check builds one batch
    )


def supervise(
    cmd: list[str],
    trainer_argv: list[str],
    name: str = "trainer",
    relay: NoticeRelay | None = None,
    *,
    cfg=None,
) -> int:
    """Runs ``cmd`` as the supervised child, with the timeouts of its trainer flags.

    Args:
        cmd: The child's command line (it sees HEARTBEAT_FD_ENV and trains).
        trainer_argv: The trainer flags in it, for ``--hang-timeout`` and friends.
        name: Log name when TF_CONFIG gives none.
        relay: The installed notice handler (see :class:`NoticeRelay`), if any.
        cfg: The flags already parsed (``spottrain.trainer.attempt.check``); ``None`` parses
            ``trainer_argv`` here.
    """
    from spottrain.exits import ConfigError
    from spottrain.trainer import config, distribution

    if cfg is None:
        try:
            cfg = config.parse_args(trainer_argv, distribution.default_dirs())
            name = distribution.read_cluster().name
        except (ConfigError, ValueError):
            cfg = config.TrainConfig()  # the child reports the error itself
    sup = Supervisor(cmd, cfg.hang_timeout, cfg.startup_timeout, name)
    from spottrain.storage import is_local

    if relay is not None and cfg.checkpoint_dir and is_local(cfg.checkpoint_dir):
        relay.on_forward = lambda reason: write_notice(cfg.checkpoint_dir, name, reason)
    code = sup.run(relay)
    if code == HUNG and sup.step is None:
        from spottrain.trainer import attempt

        attempt.record_start_hang(cfg, sup.started, sup.fired_after or 0.0)
    if sup.stopped_for_notice:
        from spottrain.trainer import attempt

        attempt.record_stopped_start(cfg, sup.started, sup.notice[0], sup.stopped_for_notice)
    return code
