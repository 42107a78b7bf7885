"""How early in a container's life a SIGTERM is lost, with and without tini as PID 1.

The kernel drops a signal sent to a PID namespace's init (PID 1) when PID 1 has no
handler for it and does not block it (signal(7), pid_namespaces(7)). Python installs
its handlers only after the interpreter and the first imports are up, so a notice in
that window is lost: the process trains on and the pod ends at its grace period.
tini blocks every signal in its first instructions, waits for them with
sigtimedwait and passes them on; a notice that arrives before our process's own
handler then finds default handling and ends it at once (exit 143, nothing trained).

Two container shapes, each started as PID 1 of a new PID namespace (``unshare
--pid --fork``), SIGTERMed from outside (as the kubelet or Vertex does) ``delay``
ms after PID 1 has exec'd the command, interleaved, a few trials per cell:

* ``vertex``: the worker-pool command, ``[tini --] python3 -m spottrain.trainer.forward -- sh -ec
  'python3 child.py'``; the child handles SIGTERM (exit 143), else sleeps 3 s, exit 0;
* ``job``: a Job pod's command, ``[tini --] python -m spottrain.trainer.task <flags>`` training a
  small CNN on the digits for 40 steps.

An outcome is *lost* when the process ran to its end (exit 0). Printed: per shape and
delay, lost / trials, and the largest delay at which a notice was lost.

Usage: ``python bench/pid1_notice.py [--trials 3] [--shapes vertex job]`` (root: it
needs PID namespaces; ``make tools`` fetches tini into .tools/).
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/copy.py would shadow the standard library's copy module (see trainer_overhead.py).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
import time

REPO = Path(__file__).resolve().parents[1]
TINI = str(REPO / ".tools" / "bin" / "tini")
DELAYS_MS = (0, 1, 2, 5, 10, 20, 40, 60, 80, 100, 120, 150, 200, 300)

CHILD = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n"
    "time.sleep(3)\n"
)


def env() -> dict:
    e = dict(os.environ)
    e.pop("TF_CONFIG", None)
    e.update(
        PATH=f"{Path(sys.executable).parent}:{e.get('PATH', '')}",
        PYTHONPATH=str(REPO),
        TF_CPP_MIN_LOG_LEVEL="3",
        TF_NUM_INTRAOP_THREADS="1",
        TF_NUM_INTEROP_THREADS="1",
    )
    return e


def command(shape: str, with_tini: bool, work: Path, trial: str) -> list[str]:
    init = [TINI, "--"] if with_tini else []
    if shape == "vertex":
        child = work / "child.py"
        return [
            *init,
            "python3",
            "-m",
            "spottrain.trainer.forward",
            "--",
            "sh",
            "-ec",
            f"python3 {child}",
        ]
    out = work / trial
    return [
        *init, "python", "-m", "spottrain.trainer.task",
        "--image-dir", str(work / "digits"), "--backbone", "small_cnn", "--weights", "none",
        "--image-size", "32", "--train-steps", "40", "--save-every-steps", "20",
        "--checkpoint-dir", str(out / "ckpt"), "--model-dir", str(out / "model"),
    ]  # fmt: skip


def trial(cmd: list[str], delay_ms: float) -> tuple[int, float]:
    """Starts ``cmd`` as PID 1, SIGTERMs PID 1 ``delay_ms`` after its exec; (exit, s)."""
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", *cmd],
        cwd=REPO, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    want = Path(cmd[0]).name[:15]
    while True:  # from PID 1's exec of cmd[0]: before it, it is unshare mounting /proc
        try:
            pids = children.read_text().split()
            if pids and Path(f"/proc/{pids[0]}/comm").read_text().strip() == want:
                break
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd} ended before its PID 1 was seen")
    born = time.monotonic()
    time.sleep(delay_ms / 1000)
    os.kill(int(pids[0]), signal.SIGTERM)
    code = proc.wait(timeout=600)
    return code, time.monotonic() - born


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--shapes", nargs="+", default=["vertex", "job"], choices=["vertex", "job"])
    p.add_argument("--delays", type=float, nargs="+", default=list(DELAYS_MS))
    args = p.parse_args()
    if os.geteuid() != 0 or not shutil.which("unshare"):
        sys.exit("needs root and unshare (PID namespaces)")
    if not os.access(TINI, os.X_OK):
        sys.exit(f"no tini at {TINI}: run `make tools`")
    work = Path(tempfile.mkdtemp(prefix="pid1-notice-"))
    (work / "child.py").write_text(CHILD)
    if "job" in args.shapes:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        from spottrain.datasets import write_digits

        write_digits(str(work / "digits"), limit=400)
    results: dict[tuple[str, bool, float], list[tuple[int, float]]] = {}
    n = 0
    for t in range(args.trials):
        for delay in args.delays:
            for shape in args.shapes:
                for with_tini in (False, True):
                    n += 1
                    cmd = command(shape, with_tini, work, f"t{n}")
                    results.setdefault((shape, with_tini, delay), []).append(trial(cmd, delay))
        print(f"trial {t + 1}/{args.trials} done", file=sys.stderr, flush=True)
    print("| shape | PID 1 | " + " | ".join(f"{d:g} ms" for d in args.delays) + " | lost up to |")
    print("|---|---|" + "---|" * (len(args.delays) + 1))
    for shape in args.shapes:
        for with_tini in (False, True):
            cells, lost_at = [], []
            for delay in args.delays:
                runs = results[(shape, with_tini, delay)]
                lost = sum(code == 0 for code, _ in runs)
                other = sorted({code for code, _ in runs if code not in (0, 143)})
                cells.append(f"{lost}/{len(runs)}" + (f" ({other})" if other else ""))
                if lost:
                    lost_at.append(delay)
            first = "tini → python" if with_tini else "python"
            worst = f"{max(lost_at):g} ms" if lost_at else "none lost"
            print(f"| {shape} | {first} | " + " | ".join(cells) + f" | {worst} |")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
