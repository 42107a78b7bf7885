"""GKE Indexed Job, the pod side for real: 2 workers, each PID 1 of its own pod.

Each "pod" (tests/pod_network.py) has its own PID, mount, UTS and network
namespace, its own IP on a bridge, the host name ``<job>-<index>`` and peers
resolvable as ``<job>-<index>.<service>``; it runs exactly the container
command the Job gives its pods, ``python -m trainer.task …`` as PID 1, with
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
import sys
import time

import pytest
from platform_chains import REPO, chain_env, checkpoint_steps, ledger_records
from pod_network import PodNetwork, can_make_pod_networks, pid1_command, signal_pid1
from trainer_helpers import summary, tiny_args

from trainer import gang_env, preemption

_WHY_NOT = can_make_pod_networks()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT))]

JOB, SERVICE, WORKERS = "train-7f3a", "train-7f3a", 2
_EXIT_LINE = re.compile(r"exit 143: preempted: saved at step (\d+) of (\d+), 0 steps lost")


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
    cmd = [sys.executable, "-m", "trainer.task", *args]
    chains = [net.start(p, hosts, cmd, _pod_env(p.index, p.hostname), REPO) for p in pods]
    for chain in chains:
        # The container's main process is the trainer's entry point, no shell.
        assert pid1_command(chain) == cmd, pid1_command(chain)
    return pods, chains


def _finish(chains, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    codes = []
    for chain in chains:
        codes.append(chain.finish(max(1.0, deadline - time.monotonic())))
    return codes


def pod_processes(chain) -> list[int]:
    """Host PIDs of the pod's PID 1 and its children."""
    with open(f"/proc/{chain.pid1}/task/{chain.pid1}/children") as f:
        return [chain.pid1, *map(int, f.read().split())]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop(chains) -> None:
    for chain in chains:
        if chain.proc.poll() is None:
            chain.kill()


def test_sigterm_to_one_pods_pid1_all_save_one_step_and_the_new_gang_finishes(digits_dir, tmp_path):
    out = tmp_path / "run"
    args = tiny_args(
        digits_dir, out, train_steps=150, save_every_steps=1000, batch_size_per_replica=16,
        log_every_steps=1, threads=1,
    )  # fmt: skip
    ckpt = out / "checkpoints"
    with PodNetwork(tmp_path, JOB, SERVICE) as net:
        pods, chains = _start_gang(net, args)
        try:
            chains[1].wait_for_step(40, timeout=240)
            seen = chains[1].step
            sent = signal_pid1(chains[1], signal.SIGTERM)  # the kubelet, on a preemption
            codes = _finish(chains, timeout=120)
        finally:
            _stop(chains)
        seconds = time.monotonic() - sent
        texts = [c.text() for c in chains]
        assert codes == [preemption.PREEMPTED] * WORKERS, [t[-2500:] for t in texts]
        # Every worker, the unsignalled chief too, saved the same step.
        saved = {int(_EXIT_LINE.search(t).group(1)) for t in texts}
        assert len(saved) == 1, saved
        (step,) = saved
        rec = ledger_records(ckpt)[0]
        assert rec["outcome"] == "preempted" and rec["steps_lost"] == 0, rec
        assert rec["saved_step"] == rec["last_step"] == step >= seen
        assert step in checkpoint_steps(ckpt)
        assert "SIGTERM received" in texts[1] and "SIGTERM received" not in texts[0]

        new_pods, chains = _start_gang(net, args)  # the Job controller's replacements
        try:
            codes = _finish(chains, timeout=240)
        finally:
            _stop(chains)
        assert codes == [0] * WORKERS, [c.text()[-2500:] for c in chains]
    assert [p.ip for p in new_pods] != [p.ip for p in pods]  # same names, new addresses
    second = ledger_records(ckpt)[1]
    assert second["start_step"] == step and second["outcome"] == "success"
    s = summary(out)
    assert s["final_step"] == s["train_steps"] == 150
    assert s["num_workers"] == WORKERS and s["replicas"] == WORKERS
    print(
        f"gke pods: SIGTERM to worker-1's PID 1 after step {seen}; both saved step {step}, "
        f"exit 143 within {seconds:.1f} s; new gang resumed at {second['start_step']}, "
        f"final step {s['final_step']}, 0 steps lost"
    )


def test_sigkill_of_one_pod_the_other_exits_170_and_the_new_gang_resumes(digits_dir, tmp_path):
    out = tmp_path / "run"
    save_every = 20
    args = tiny_args(
        digits_dir, out, train_steps=100, save_every_steps=save_every, collective_timeout=15,
        log_every_steps=1, threads=1,
    )  # fmt: skip
    ckpt = out / "checkpoints"
    with PodNetwork(tmp_path, JOB, SERVICE) as net:
        _, chains = _start_gang(net, args)
        try:
            chains[1].wait_for_step(50, timeout=240)
            killed_at_step = chains[1].step
            pod = pod_processes(chains[1])  # PID 1 and the trainer below it
            sent = signal_pid1(chains[1], signal.SIGKILL)  # node lost: no notice
            # (unshare 2.38 reports a child killed by a signal as 1, so the
            # container's 137 is not what this returns.)
            chains[1].finish(timeout=30)
            chief = chains[0].finish(timeout=90)
        finally:
            _stop(chains)
        seconds = time.monotonic() - sent
        # PID 1 killed: the kernel ends its namespace, trainer included.
        assert len(pod) >= 2 and not any(_alive(pid) for pid in pod), pod
        assert chief == preemption.PEER_LOST, chains[0].text()[-3000:]
        assert seconds < 60, f"survivor took {seconds:.0f} s"
        assert ledger_records(ckpt)[0]["outcome"] == "worker_lost"
        last_save = max(checkpoint_steps(ckpt))

        _, chains = _start_gang(net, args)
        try:
            codes = _finish(chains, timeout=240)
        finally:
            _stop(chains)
        assert codes == [0] * WORKERS, [c.text()[-2500:] for c in chains]
    second = ledger_records(ckpt)[1]
    assert second["start_step"] == last_save  # exactly from the last complete save
    lost = killed_at_step - last_save
    assert 0 <= lost <= save_every, (killed_at_step, last_save)
    assert summary(out)["final_step"] == 100
    print(
        f"gke pods: SIGKILL to worker-1's PID 1 after step {killed_at_step}; chief exit "
        f"{chief} after {seconds:.1f} s; new gang resumed at {last_save} ({lost} steps lost, "
        f"save interval {save_every}), final step 100"
    )
