"""Local multi-worker launcher: ``python -m spottrain.trainer.launch --workers N -- <flags>``.

Starts N ``spottrain.trainer.task`` processes on this machine with ``TF_CONFIG`` as
Vertex AI sets it (one ``chief`` and N-1 ``worker`` tasks on free 127.0.0.1
ports) and Vertex-like ``AIP_*`` output dirs, prints one line per event from their
logs with a prefix (each worker's whole log in ``--log-dir``; ``--verbose`` prints
it all), and exits with the code of the first worker that failed. When one
worker dies the others get ``--grace`` seconds to notice on their own, then
SIGTERM, then SIGKILL: no orphan, no hang. Workers also die with the launcher
(PR_SET_PDEATHSIG), so killing the launcher cleans everything up.

A worker still alive when the others are stopped, frozen (stopped) or not
exiting ``--kill-after`` seconds after SIGTERM, gets its stacks dumped from here
(py-spy reads a stopped process too) into the dump file its trainer announced
(``diagnostics/`` beside the checkpoints), is killed and counts as hung (171): a
frozen worker cannot dump itself, its supervisor being frozen with it.

Chaos: ``--preempt-at-step K --signal TERM|KILL|STOP|FREEZE`` sends the signal to one
worker once it reports step K (STOP freezes its trainer, FREEZE the whole worker,
supervisor included, as a frozen VM). It only fires on an attempt that starts from
step 0, so the retry that resumes from the checkpoint runs to the end, as
after a real preemption (one injected fault per run, not one per attempt).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from spottrain.exits import FATAL_CONFIG, HUNG, PREEMPTED, exit_code
from spottrain.trainer import watchdog, worker_logs
from spottrain.trainer.heartbeat import PROGRESS_FD_ENV
from spottrain.trainer.local_cluster import children, default_max_workers, free_ports, tf_configs
from spottrain.trainer.preemption import die_with_parent


@dataclass
class Worker:
    """One trainer process and what the launcher saw of it."""

    name: str
    proc: subprocess.Popen
    start_step: int | None = None
    last_step: int = -1
    code: int | None = None
    ended_at: float | None = None
    progress_fd: int = -1  # read end of the worker's progress pipe
    dump_path: str = ""  # where its trainer wants a hang's stack dump
    log: worker_logs.WorkerLog | None = None  # its whole log, when the console shows events


@dataclass
class LaunchResult:
    """Outcome of one launch."""

    code: int
    worker_codes: dict[str, int] = field(default_factory=dict)
    first_failure: str | None = None
    chaos: dict | None = None  # {"worker", "signal", "step"} when chaos fired
    seconds: float = 0.0


class StartFailure(Exception):
    """The OS refused a process, pipe or thread while the workers were starting."""


class ProcessLauncher:
    """Runs and supervises the local workers."""

    def __init__(
        self,
        workers: int,
        trainer_args: list[str],
        *,
        output_dir: str = "",
        preempt_at_step: int = 0,
        signal_name: str = "TERM",
        preempt_worker: str = "random",
        grace: float = 0.0,
        kill_after: float = 20.0,
        seed: int | None = None,
        module: str = "spottrain.trainer.task",
        stream=None,
        max_workers: int | None = None,
        log_dir: str | None = None,
    ):
        cap = max_workers if max_workers is not None else default_max_workers()
        if workers < 1:
            raise ValueError(f"--workers {workers} must be >= 1")
        if workers > cap:
            raise ValueError(
                f"--workers {workers} is more than {cap} (4 per CPU here); each worker is a "
                "full trainer process: pass --max-workers to allow more"
            )
        if output_dir and os.path.exists(output_dir) and not os.path.isdir(output_dir):
            raise ValueError(f"--output-dir {output_dir!r} is a file, not a folder")
        if preempt_at_step < 0:
            raise ValueError(f"--preempt-at-step {preempt_at_step} must be >= 0 (0 = off)")
        for flag, seconds in (("--grace", grace), ("--kill-after", kill_after)):
            if not (seconds >= 0 and seconds < float("inf")):
                raise ValueError(f"{flag} {seconds} must be a finite number of seconds >= 0")
        if signal_name not in ("TERM", "KILL", "INT", "STOP", "FREEZE"):
            raise ValueError(f"--signal {signal_name!r} must be TERM, KILL, INT, STOP or FREEZE")
        self.freeze = signal_name == "FREEZE"
        self.n = workers
        self.trainer_args = list(trainer_args)
        self.output_dir = output_dir
        self.preempt_at_step = preempt_at_step
        self.signal = signal.SIGSTOP if self.freeze else getattr(signal, f"SIG{signal_name}")
        rng = random.Random(seed)
        self.chaos_target = (
            rng.randrange(workers) if preempt_worker == "random" else int(preempt_worker)
        )
        if not 0 <= self.chaos_target < workers:
            raise ValueError(f"--preempt-worker {preempt_worker} is not in 0..{workers - 1}")
        self.grace = grace
        self.kill_after = kill_after
        self.module = module
        self.stream = stream or sys.stdout
        # None: every line of every worker on the stream (a pod's log is its only copy);
        # "": worker_logs.default_dir, made when the workers start.
        self.log_dir = log_dir
        if log_dir:  # before any worker: a file there failed as "lower --workers"
            from spottrain.fileio import unwritable_folder

            if problem := unwritable_folder(log_dir):
                raise ValueError(f"--log-dir {log_dir!r}: {problem}")
        self.workers: list[Worker] = []
        self.chaos: dict | None = None
        self._lock = threading.Lock()
        self._stopping = False

    def _env(self, tf_config: dict | None) -> dict:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env.pop("TF_CONFIG", None)
        if tf_config is not None:
            env["TF_CONFIG"] = json.dumps(tf_config)
        if self.output_dir:  # what Vertex derives from base_output_directory
            base = self.output_dir.rstrip("/")
            env["AIP_MODEL_DIR"] = f"{base}/model"
            env["AIP_CHECKPOINT_DIR"] = f"{base}/checkpoints"
            env["AIP_TENSORBOARD_LOG_DIR"] = f"{base}/logs"
        return env

    def _print(self, line: str) -> None:
        with self._lock:
            self.stream.write(line if line.endswith("\n") else line + "\n")
            self.stream.flush()

    def _pump(self, index: int) -> None:
        """Prints a worker's log with its name."""
        w = self.workers[index]
        for raw in w.proc.stdout:
            line = raw.rstrip(chr(10))
            shown = w.log.write(line) if w.log else True
            if shown:
                self._print(f"[{w.name}] {line}")

    def _follow(self, index: int) -> None:
        """Reads a worker's progress lines (``start N``, ``step N``: watchdog's protocol)."""
        w = self.workers[index]
        with os.fdopen(w.progress_fd, "rb") as progress:
            for raw in progress:
                kind, _, value = raw.decode(errors="replace").strip().partition(" ")
                if kind == "start":
                    w.start_step = int(value)
                elif kind == "dump":
                    w.dump_path = value
                elif kind == "step":
                    w.last_step = int(value)
                    self._maybe_preempt(index)

    def _maybe_preempt(self, index: int) -> None:
        w = self.workers[index]
        k = self.preempt_at_step
        if (
            not k
            or self.chaos
            or index != self.chaos_target
            or w.last_step < k
            or w.start_step != 0
        ):
            return
        self.chaos = {
            "worker": w.name,
            "signal": "FREEZE" if self.freeze else signal.Signals(self.signal).name,
            "step": w.last_step,
            "at": time.monotonic(),
        }
        self._print(
            f"[launcher] chaos: sending {self.chaos['signal']} to {w.name} at step {w.last_step}"
        )
        # STOP freezes the trainer itself (a live-but-stuck peer), not its
        # supervisor, which must stay awake to notice the hang; FREEZE both.
        pids = children(w.proc.pid) if self.signal == signal.SIGSTOP else []
        if self.freeze:
            pids = [w.proc.pid, *pids]
        for pid in pids or [w.proc.pid]:
            try:
                os.kill(pid, self.signal)
            except ProcessLookupError:
                pass

    def _forward(self, signum, _frame) -> None:
        """The launcher itself is being preempted: pass it on, workers save and exit."""
        self._print(f"[launcher] {signal.Signals(signum).name}: forwarding to the workers")
        self._stopping = True
        for w in self.workers:
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGTERM)

    def run(self) -> LaunchResult:
        """Starts the workers, waits for them, returns the combined outcome."""
        started = time.monotonic()
        configs = tf_configs(free_ports(self.n)) if self.n > 1 else [("chief-0", None)]
        cmd = [sys.executable, "-m", self.module, *self.trainer_args]
        in_main = threading.current_thread() is threading.main_thread()
        old = {}
        if in_main:
            for s in (signal.SIGTERM, signal.SIGINT):
                old[s] = signal.signal(s, self._forward)
        pumps = []
        try:
            try:
                self._start(cmd, configs, pumps)
            except (OSError, RuntimeError) as e:
                # Fork, pipe or thread creation refused (process, memory or file
                # limit): the finally below stops the workers already started.
                what = (
                    f"worker {len(self.workers) + 1} of {self.n}"
                    if len(self.workers) < self.n
                    else f"the log readers of {self.n} workers"
                )
                raise StartFailure(
                    f"could not start {what} ({e}): this machine's process, memory or "
                    "file limit is reached; lower --workers"
                ) from None
            first_failure = self._supervise()
        finally:
            for w in self.workers:  # never leave a worker behind
                if w.proc.poll() is None:
                    w.proc.kill()
                    w.proc.wait()
            for t in pumps:
                t.join(timeout=5)
            for s, h in old.items():
                signal.signal(s, h)
            self._close_logs()
        codes = {w.name: w.code for w in self.workers}
        code = codes[first_failure] if first_failure else 0
        if code == 0 and self._stopping:
            code = PREEMPTED
        result = LaunchResult(
            code, codes, first_failure, self.chaos, round(time.monotonic() - started, 2)
        )
        self._print(
            f"[launcher] exit {code}; workers: "
            + ", ".join(f"{k}={v}" for k, v in codes.items())
            + (f"; first failure {first_failure}" if first_failure else "")
        )
        return result

    def _start(self, cmd: list[str], configs, pumps: list) -> None:
        if self.log_dir == "":
            self.log_dir = worker_logs.default_dir(self.output_dir)
        for name, tf_config in configs:
            read_fd, write_fd = os.pipe()
            env = self._env(tf_config)
            env[PROGRESS_FD_ENV] = str(write_fd)
            try:
                proc = subprocess.Popen(
                    cmd,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    bufsize=1,
                    pass_fds=(write_fd,),
                    preexec_fn=die_with_parent,
                )
            except BaseException:
                os.close(read_fd)
                raise
            finally:
                os.close(write_fd)
            log = None
            if self.log_dir is not None:
                log = worker_logs.WorkerLog(self.log_dir, name, chief=not self.workers)
            self.workers.append(Worker(name, proc, progress_fd=read_fd, log=log))
        self._print(
            f"[launcher] started {self.n} worker(s): "
            + ", ".join(f"{w.name} pid {w.proc.pid}" for w in self.workers)
        )
        if self.log_dir is not None:
            self._print(
                f"[launcher] one line per event here; each worker's whole log in "
                f"{self.log_dir}/<name>.log"
            )
        for i in range(self.n):
            for target in (self._pump, self._follow):
                t = threading.Thread(target=target, args=(i,), daemon=True)
                t.start()
                pumps.append(t)

    def _close_logs(self) -> None:
        """Closes the log files; a worker that crashed gets its last lines shown."""
        for w in self.workers:
            if w.log is None:
                continue
            w.log.close()
            tail = [] if w.code in (0, PREEMPTED) else w.log.crash_tail()
            if tail:
                self._print(f"[launcher] {w.name} exited with {w.code}; its last lines "
                            f"(all in {w.log.path}):")  # fmt: skip
                for line in tail:
                    self._print(f"[{w.name}] | {line}")

    def _supervise(self) -> str | None:
        first_failure = None
        deadline_term = deadline_kill = None
        while True:
            now = time.monotonic()
            for w in self.workers:
                if w.code is None and w.proc.poll() is not None:
                    w.code, w.ended_at = exit_code(w.proc.returncode), now
                    if w.code != 0 and first_failure is None:
                        first_failure = w.name
                        deadline_term = now + self.grace
                        self._print(
                            f"[launcher] {w.name} exited with {w.code}; "
                            f"stopping the others in {self.grace:g} s"
                        )
            alive = [w for w in self.workers if w.code is None]
            if not alive:
                return first_failure
            if deadline_term is not None and now >= deadline_term:
                for w in alive:
                    if watchdog.stopped(w.proc.pid):  # SIGTERM would wait forever
                        self._dump_and_kill(w, "frozen (stopped), supervisor included")
                    else:
                        self._print(f"[launcher] SIGTERM {w.name}")
                        w.proc.send_signal(signal.SIGTERM)
                deadline_term, deadline_kill = None, now + self.kill_after
            if deadline_kill is not None and now >= deadline_kill:
                for w in alive:
                    if w.code is None:
                        self._dump_and_kill(w, f"no exit {self.kill_after:g} s after SIGTERM")
                deadline_kill = None
            time.sleep(0.05)

    def _dump_and_kill(self, w: Worker, why: str) -> None:
        """Dumps a stuck worker's stacks from outside, kills it, counts it hung (171)."""
        pid = next(iter(children(w.proc.pid)), w.proc.pid)  # its trainer, else itself
        where = f"after step {w.last_step}" if w.last_step >= 0 else "before the first step"
        header = f"HANG: {w.name} {why}, {where}; dumped by the launcher, trainer pid {pid}"
        self._print(f"[launcher] {header}")
        text = watchdog.py_spy_dump(pid) or "(no stack dump could be taken)"
        w.proc.kill()
        w.proc.wait()
        w.code, w.ended_at = HUNG, time.monotonic()
        watchdog.write_report(f"{header}\nstacks (py-spy):\n{text}", w.dump_path)
        self._print(f"[launcher] SIGKILL {w.name}: counted as hung ({HUNG})")


def build_parser() -> argparse.ArgumentParser:
    """The launcher's command line (trainer flags follow ``--``)."""
    p = argparse.ArgumentParser(
        prog="python -m spottrain.trainer.launch",
        description="Run N local MWMS workers of spottrain.trainer.task (TF_CONFIG on 127.0.0.1).",
        epilog="Example: python -m spottrain.trainer.launch --workers 2 --output-dir out -- "
        "--image-dir digits --backbone small_cnn --weights none --train-steps 200",
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--output-dir",
        default="",
        help="Sets AIP_MODEL_DIR/AIP_CHECKPOINT_DIR/AIP_TENSORBOARD_LOG_DIR "
        "under it, as Vertex's base_output_directory does.",
    )
    p.add_argument(
        "--preempt-at-step",
        type=int,
        default=0,
        help="Chaos: signal one worker when it reports this step (0: off). This "
        "launcher never retries: the run ends (143 for TERM); run it again to resume, as "
        "KFP's or Vertex's retry would.",
    )
    p.add_argument(
        "--signal",
        default="TERM",
        help="TERM (preemption notice), KILL (node lost), STOP (frozen trainer) or "
        "FREEZE (frozen worker, its supervisor included).",
    )
    p.add_argument("--preempt-worker", default="random", help="Worker index or 'random'.")
    p.add_argument("--seed", type=int, default=None, help="Seed for the random worker choice.")
    p.add_argument(
        "--grace",
        type=float,
        default=0.0,
        help="Seconds the others may run on after a worker fails.",
    )
    p.add_argument(
        "--kill-after",
        type=float,
        default=20.0,
        help="Seconds between SIGTERM and SIGKILL when stopping workers.",
    )
    p.add_argument(
        "--max-workers",
        type=int,
        default=None,
        help="Allow more than 4 workers per CPU (default: 4 x the CPU count).",
    )
    p.add_argument(
        "--log-dir",
        default=None,
        help="Where each worker's whole log goes (<name>.log, appended); default "
        "<output-dir>/worker-logs, else a new temporary folder.",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="Print every worker's every line here (no log files), not one line per event.",
    )
    p.add_argument("trainer_args", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit code."""
    from spottrain.trainer.stdio import survive_broken_pipes

    survive_broken_pipes()  # the workers' logs pass through here
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    trainer_args = args.trainer_args
    if trainer_args and trainer_args[0] == "--":
        trainer_args = trainer_args[1:]
    try:
        launcher = ProcessLauncher(
            args.workers,
            trainer_args,
            output_dir=args.output_dir,
            preempt_at_step=args.preempt_at_step,
            signal_name=args.signal.upper(),
            preempt_worker=args.preempt_worker,
            grace=args.grace,
            kill_after=args.kill_after,
            seed=args.seed,
            max_workers=args.max_workers,
            log_dir=None if args.verbose else args.log_dir or "",
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return FATAL_CONFIG
    try:
        return launcher.run().code
    except StartFailure as e:
        print(f"error: {e}", file=sys.stderr)
        return FATAL_CONFIG


if __name__ == "__main__":
    sys.exit(main())
