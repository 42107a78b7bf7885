"""GKE Indexed Job, the pod side for real: 2 workers, each PID 1 of its own pod.

Each "pod" (tests/pod_network.py) has its own PID, mount, UTS and network
namespace, its own IP on a bridge, the host name ``<job>-<index>`` and peers
resolvable as ``<job>-<index>.<service>``; it runs exactly the container
command the Job gives its pods, ``tini -- python -m spottrain.trainer.task …`` (tini as PID 1), with
the Job's env (``JOB_COMPLETION_INDEX``, ``SPOTTRAIN_JOB_*``, no ``TF_CONFIG``),
and every worker's gRPC server on the same port 2222. The checkpoint dir is a
local folder shared by the pods (``gs://`` in the cluster). A gang restart is
what the Job controller does after the pods failed: new pods, new IPs, the
same names and env. Not involved: a kubelet, container runtime, API server
or cluster DNS.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from platform_chains import (
    NO_TINI,
    REPO,
    chain_env,
    checkpoint_steps,
    finish_chains,
    have_tini,
    ledger_records,
    stop_chains,
    wait_for_step,
)
from pod_network import PodNetwork, can_make_pod_networks, pid1_command, signal_pid1
from trainer_helpers import summary, tiny_args

from spottrain import exits
from spottrain.runtime.train_job.jobset import TRAINER_COMMAND
from spottrain.trainer import gang_env

_WHY_NOT = can_make_pod_networks()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT)),
    pytest.mark.skipif(not have_tini(), reason=NO_TINI),
]

JOB, SERVICE, WORKERS = "train-7f3a", "train-7f3a", 2
# The chief's line claims the save; the others' say it is complete once the chief
# got through the barrier after it.
_EXIT_LINE = re.compile(
    r"exit 143: preempted(?:: saved at step (\d+) of (\d+), 0 steps lost| at step (\d+) of "
    r"(\d+): the chief's save is complete, 0 steps lost)"
)


def _pod_env(index: int, hostname: str) -> dict:
    """The container env the launcher's Job gives pod ``index`` (plus the image's)."""
    return chain_env(
        {
            gang_env.JOB_COMPLETION_INDEX: str(index),  # set by Kubernetes
            gang_env.JOB_NAME: JOB,
            gang_env.SERVICE: SERVICE,
            gang_env.WORKERS: str(WORKERS),
            gang_env.PORT: str(gang_env.DEFAULT_PORT),
            "HOSTNAME": hostname,  # set by the container runtime
        }
    )


def _start_gang(net: PodNetwork, args: list[str]):
    pods = net.gang(WORKERS)
    hosts = net.hosts_file(pods)
    cmd = [*TRAINER_COMMAND, *args]  # the Job's container command (python: the venv's)
    chains = [net.start(p, hosts, cmd, _pod_env(p.index, p.hostname), REPO) for p in pods]
    try:
        for chain in chains:
            # The container's main process is tini, then the trainer's entry point, no shell.
            assert pid1_command(chain) == cmd, pid1_command(chain)
    except BaseException:
        stop_chains(chains)
        raise
    return pods, chains


def pod_processes(chain) -> list[int]:
    """Host PIDs of the pod's PID 1 and all its descendants (tini, supervisor, trainer)."""
    found, todo = [], [chain.pid1]
    while todo:
        pid = todo.pop()
        found.append(pid)
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                todo += map(int, f.read().split())
        except FileNotFoundError:
            pass
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _run_gang(net: PodNetwork, args: list[str]):
    t0 = time.monotonic()
    pods, chains = _start_gang(net, args)
    return pods, chains, t0


def _gang_to_the_end(net: PodNetwork, args: list[str], timeout: float = 240):
    """A new gang that must finish the run: its pods, and every pod exited 0."""
    pods, chains, _ = _run_gang(net, args)
    try:
        codes = finish_chains(chains, timeout=timeout)
    finally:
        stop_chains(chains)
    assert codes == [0] * WORKERS, [c.text()[-2500:] for c in chains]
    return pods


def test_pods_sigkill_then_sigterm_then_the_gang_finishes_exactly(digits_dir, tmp_path):
    """Three attempts of one run, as the Job controller would make them.

    1. SIGKILL worker-1's PID 1 (node lost): the chief exits 170 in bounded time.
    2. The new gang resumes exactly from the last complete save; SIGTERM
       worker-1's PID 1 (preemption notice): both save the same step, exit 143.
    3. The new gang resumes from that step and ends at exactly the final step.
    One scenario instead of two keeps it to three gang starts (CI time).
    """
    out = tmp_path / "run"
    steps, save_every = 100, 20
    args = tiny_args(
        digits_dir, out, train_steps=steps, save_every_steps=save_every,
        log_every_steps=1, threads=1,
    )  # fmt: skip
    ckpt = out / "checkpoints"
    figures = []
    with PodNetwork(tmp_path, JOB, SERVICE) as net:
        # 1. SIGKILL: no notice, the pod and everything in it is gone.
        pods1, chains, t0 = _run_gang(net, args)
        try:
            wait_for_step(chains, 1, 30, timeout=240)
            killed_at_step = chains[1].step
            pod = pod_processes(chains[1])  # tini, the supervisor and the trainer
            net.unplug(pods1[1])
            sent = signal_pid1(chains[1], signal.SIGKILL)
            # (unshare 2.38 reports a child killed by a signal as 1, so the
            # container's 137 is not what this returns.)
            chief, _ = finish_chains(chains, timeout=90)
        finally:
            stop_chains(chains)
        seconds = time.monotonic() - sent
        # PID 1 killed: the kernel ends its namespace, trainer included.
        assert len(pod) >= 3 and not any(_alive(pid) for pid in pod), pod
        assert chief == exits.PEER_LOST, chains[0].text()[-3000:]
        assert seconds < 60, f"survivor took {seconds:.0f} s"
        assert ledger_records(ckpt)[0]["outcome"] == "worker_lost"
        last_save = max(checkpoint_steps(ckpt))
        lost = killed_at_step - last_save
        assert 0 <= lost <= save_every, (killed_at_step, last_save)
        figures.append(
            f"SIGKILL after step {killed_at_step}: chief exit {chief} {seconds:.1f} s later, "
            f"last save {last_save} ({lost} steps lost); attempt {time.monotonic() - t0:.0f} s"
        )

        # 2. SIGTERM to one pod: every worker saves the same step, exits 143.
        pods2, chains, t0 = _run_gang(net, args)
        try:
            wait_for_step(chains, 1, last_save + 20, timeout=240)
            seen = chains[1].step
            sent = signal_pid1(chains[1], signal.SIGTERM)  # the kubelet, on a preemption
            codes = finish_chains(chains, timeout=120)
        finally:
            stop_chains(chains)
        seconds = time.monotonic() - sent
        texts = [c.text() for c in chains]
        assert codes == [exits.PREEMPTED] * WORKERS, [t[-2500:] for t in texts]
        records = ledger_records(ckpt)
        assert records[1]["start_step"] == last_save  # resumed exactly from the last save
        saved = {int(m.group(1) or m.group(3)) for t in texts for m in [_EXIT_LINE.search(t)] if m}
        assert len(saved) == 1 and all(_EXIT_LINE.search(t) for t in texts), saved
        (step,) = saved
        rec = records[1]
        assert rec["outcome"] == "preempted" and rec["steps_lost"] == 0, rec
        assert rec["saved_step"] == rec["last_step"] == step >= seen
        assert step in checkpoint_steps(ckpt)
        assert "SIGTERM received" in texts[1] and "SIGTERM received" not in texts[0]
        figures.append(
            f"SIGTERM after step {seen}: both saved step {step}, exit 143 within "
            f"{seconds:.1f} s, 0 lost; attempt {time.monotonic() - t0:.0f} s"
        )

        # 3. The replacements finish the run.
        t0 = time.monotonic()
        pods3 = _gang_to_the_end(net, args)
        figures.append(f"finished; attempt {time.monotonic() - t0:.0f} s")
    # Every gang: the same names, new addresses.
    assert len({tuple(p.ip for p in g) for g in (pods1, pods2, pods3)}) == 3
    third = ledger_records(ckpt)[2]
    assert third["start_step"] == step and third["outcome"] == "success"
    s = summary(out)
    assert s["final_step"] == s["train_steps"] == steps
    assert s["num_workers"] == WORKERS and s["replicas"] == WORKERS
    print("gke pods: " + "; ".join(figures) + f"; final step {s['final_step']}")


def test_a_user_task_in_job_pods_saves_on_notice_and_finishes_exactly(tmp_path):
    """The Task API in the JobSet engine's pods: tini -> spottrain.trainer.task as each pod's PID 1,
    the task from --task; SIGTERM to one pod, both save the same step; the next gang
    ends at exactly the final step."""
    out = tmp_path / "run"
    ckpt = out / "checkpoints"
    args = [
        "--task", "examples.regression:Regression", "--task-args", '{"features": 8}',
        "--train-steps", "600", "--batch-size-per-replica", "16",
        "--save-every-steps", "100000", "--save-every-seconds", "0", "--log-every-steps", "1",
        "--threads", "1",
        "--checkpoint-dir", str(ckpt), "--model-dir", str(out / "model"),
    ]  # fmt: skip
    with PodNetwork(tmp_path, JOB, SERVICE) as net:
        _, chains, _ = _run_gang(net, args)
        try:
            wait_for_step(chains, 1, 20, timeout=240)
            signal_pid1(chains[1], signal.SIGTERM)
            codes = finish_chains(chains, timeout=120)
        finally:
            stop_chains(chains)
        texts = [c.text() for c in chains]
        assert codes == [exits.PREEMPTED] * WORKERS, [t[-2500:] for t in texts]
        rec = ledger_records(ckpt)[0]
        assert rec["outcome"] == "preempted" and rec["steps_lost"] == 0, rec
        _gang_to_the_end(net, args)
    records = ledger_records(ckpt)
    assert records[1]["start_step"] == rec["saved_step"]
    assert summary(out)["final_step"] == 600
