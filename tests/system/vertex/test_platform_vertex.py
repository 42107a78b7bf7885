"""Vertex AI container reproduction: the compiled worker-pool command as PID 1, SIGTERMed.

Vertex runs a custom job's ``container_spec.command + args`` as the container's
main process and sends it SIGTERM on a spot preemption. GCPC copies the train
component's command into the worker pools unchanged
(google_cloud_pipeline_components/v1/custom_job/utils.py), so the command here
is read from the committed ``spottrain_vertex.yaml`` exactly as a user uploads
it, its executor input filled by kfp.local's own code, and it is run as PID 1
of a new PID namespace. Set ``SPOTTRAIN_TRIALS`` for more signal trials.
"""

from __future__ import annotations

import os
import random
import re
import signal
import time

import pytest
from kfp import dsl
from platform_chains import (
    NO_TINI,
    REPO,
    can_unshare,
    chain_env,
    checkpoint_steps,
    compiled_docs,
    executor_input,
    fill_placeholders,
    have_tini,
    ledger_records,
    start_as_pid1,
)

from spottrain import exits
from spottrain.components.train.component import train
from spottrain.pipelines import compile as compile_mod
from spottrain.pipelines import templates
from spottrain.pipelines.vertex import FORWARD_COMMAND

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not can_unshare(), reason="needs PID namespaces (unshare as root)"),
]
TRIALS = int(os.environ.get("SPOTTRAIN_TRIALS", "2"))


def compiled_worker_pool_command() -> list[str]:
    """Pool 0's command + args from the committed Vertex pipeline YAML (as Vertex gets them)."""
    spec = compiled_docs(compile_mod.COMPILED_DIR / compile_mod.VERTEX_YAML)[0]
    (job,) = templates.custom_jobs(spec)  # the task's constant, else the component's default
    container = job["worker_pool_specs"][0]["container_spec"]
    return [*container["command"], *container["args"]]


def _arguments(digits_dir: str, run) -> dict:
    return dict(
        data=dsl.Dataset(uri=digits_dir),
        checkpoint_dir=str(run / "checkpoints"),
        backbone="small_cnn",
        weights="none",
        image_size=32,
        batch_size_per_replica=32,
        train_steps=5000,
        save_every_steps=100000,  # no periodic save: only the notice can save
        extra_args=["--log-every-steps", "1", "--save-every-seconds", "0", "--threads", "1"],
        expect_gpus=0,
    )


def _start(command: list[str], digits_dir: str, run):
    run.mkdir(parents=True)
    filled = fill_placeholders(
        command, executor_input(train, _arguments(digits_dir, run), run / "task"), run / "task"
    )
    return start_as_pid1(filled, chain_env(), cwd=REPO)


def test_compiled_pools_start_with_the_forwarding_init():
    command = compiled_worker_pool_command()
    assert command[: len(FORWARD_COMMAND)] == FORWARD_COMMAND
    # What follows is the component's own command, untouched (GCPC copies it).
    assert command[len(FORWARD_COMMAND) : len(FORWARD_COMMAND) + 2] == ["sh", "-ec"]


def test_without_the_init_the_shell_as_pid1_drops_sigterm(digits_dir, tmp_path):
    """The defect as Vertex had it: PID 1 is sh, the trainer never hears the notice."""
    bare = compiled_worker_pool_command()[len(FORWARD_COMMAND) :]
    run = tmp_path / "bare"
    chain = _start(bare, digits_dir, run)
    try:
        chain.wait_for_step(20, timeout=180)
        at_signal = chain.step
        os.kill(chain.pid1, signal.SIGTERM)
        end = time.monotonic() + 5
        while time.monotonic() < end:
            chain.pump(0.5)
        assert chain.proc.poll() is None, "PID 1 (sh) should ignore SIGTERM"
        assert chain.step > at_signal + 5, "the trainer kept training"
        assert "SIGTERM received" not in chain.text()
    finally:
        chain.kill()
    # Killed after the grace period: nothing was saved since the start.
    assert checkpoint_steps(run / "checkpoints") == []
    assert ledger_records(run / "checkpoints")[-1]["outcome"] == "running"


@pytest.mark.skipif(not have_tini(), reason=NO_TINI)
def test_tini_alone_lets_the_shell_die_and_the_trainer_is_killed_unsaved(digits_dir, tmp_path):
    """Why spottrain.trainer.forward stays behind tini: tini starts the shell with SIGTERM at its
    default, so the shell dies of the notice, tini exits and the kernel ends the
    namespace, trainer included, before its save."""
    tini_only = ["tini", "--", *compiled_worker_pool_command()[len(FORWARD_COMMAND) :]]
    run = tmp_path / "tini-only"
    chain = _start(tini_only, digits_dir, run)
    chain.wait_for_step(20, timeout=180)
    os.kill(chain.pid1, signal.SIGTERM)
    sent = time.monotonic()
    code = chain.finish(timeout=60)
    assert code == exits.PREEMPTED  # tini: 128 + the shell's SIGTERM ...
    assert time.monotonic() - sent < 5
    # ... but nobody saved: PID 1's exit killed the trainer in its handler or before.
    assert checkpoint_steps(run / "checkpoints") == []
    assert ledger_records(run / "checkpoints")[-1]["outcome"] != "preempted"


@pytest.mark.skipif(not have_tini(), reason=NO_TINI)
@pytest.mark.parametrize("trial", range(TRIALS))
def test_sigterm_to_pid1_saves_at_the_next_step_zero_lost(digits_dir, tmp_path, trial):
    run = tmp_path / f"trial{trial}"
    chain = _start(compiled_worker_pool_command(), digits_dir, run)
    at = random.Random(trial).randint(15, 60)
    chain.wait_for_step(at, timeout=180)
    seen = chain.step
    os.kill(chain.pid1, signal.SIGTERM)
    sent = time.monotonic()
    code = chain.finish(timeout=120)
    seconds = time.monotonic() - sent
    text = chain.text()
    assert code == exits.PREEMPTED, text[-3000:]
    rec = ledger_records(run / "checkpoints")[-1]
    assert rec["outcome"] == "preempted" and rec["steps_lost"] == 0, rec
    assert rec["saved_step"] == rec["last_step"] == rec["notice_step"]
    # Saved right after the step in flight when the signal came ("SIGTERM received" is
    # logged then, by the notice thread). One step a call, the device is a step ahead
    # of the log: the step being logged and the one run ahead may both have run.
    before = text[: text.index("SIGTERM received")]
    last_logged = max(int(m) for m in re.findall(r"\bstep (\d+)/", before))
    assert seen <= rec["saved_step"] and last_logged <= rec["saved_step"] <= last_logged + 2, (
        seen,
        last_logged,
        rec,
    )
    assert rec["saved_step"] in checkpoint_steps(run / "checkpoints")
    # No AIP_TENSORBOARD_LOG_DIR here (no base_output_directory): logs go beside the checkpoints.
    assert list((run / "checkpoints" / "tensorboard").glob("events.out.tfevents.*"))
    print(
        f"vertex trial {trial}: SIGTERM after step {seen}, saved step {rec['saved_step']}, "
        f"exit {code} {seconds:.1f} s after the signal, 0 lost"
    )
