"""KFP-on-Argo pod reproduction: the compiled train command under Argo's emissary.

In a KFP task pod on GKE the chain is ``argoexec emissary`` (PID 1) →
``/kfp-launcher/launch`` → ``sh -ec`` → ``python3 -m kfp.dsl.executor_main`` →
our hang supervisor → the trainer (see tests/standins/ for the cited upstream
lines each stand-in mirrors). PID 1 is Argo v4.0.5's real ``argoexec`` when
``make argoexec`` built it into .tools/bin (``SPOTTRAIN_EMISSARY=standin`` forces
the stand-in), else tests/standins/argo_emissary.py, with a warning naming why.
On SIGTERM the emissary forwards it to the launcher's process group, the
launcher dies at once, the emissary reaps it at its next one-second poll (argoexec
sometimes one poll later, having reaped the orphaned ``sh`` first) and exits 143,
and the kernel kills the rest of the namespace. The trainer cannot count
on the notice period here; what this file checks is what we promise instead
(docs/gke.md): it never dies of its dead log pipe, it saves on notice when the
time allows, and otherwise the loss is bounded by the time-based asynchronous
saves.

``SPOTTRAIN_TRIALS`` (default 2) and ``SPOTTRAIN_KFP_BACKBONES`` (default
``small_cnn``; ``small_cnn,resnet50`` for the closing-note figures) scale it up.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
import warnings

import pytest
from kfp import dsl
from platform_chains import (
    ARGOEXEC,
    REPO,
    STANDINS,
    can_unshare,
    chain_env,
    checkpoint_steps,
    compiled_docs,
    executor_input,
    fill_placeholders,
    ledger_records,
    namespace_processes,
    start_as_pid1,
)

from spottrain import exits
from spottrain import ledger as ledger_lib
from spottrain.components.train.component import train
from spottrain.pipelines import compile as compile_mod
from spottrain.runtime import termination
from spottrain.trainer import metadata_notice

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not can_unshare(), reason="needs PID namespaces (unshare as root)"),
]
TRIALS = int(os.environ.get("SPOTTRAIN_TRIALS", "2"))
BACKBONES = os.environ.get("SPOTTRAIN_KFP_BACKBONES", "small_cnn").split(",")
# Test-scale interval of the time-based saves (the default is 60 s).
SAVE_EVERY_S = 3.0
# Slack on that bound: the checkpoint being written when the kill comes, and a
# step (ResNet50 on a loaded 2-core CPU: up to ~2 s for both).
WRITE_AND_STEP_S = 3.0
SIZES = {"small_cnn": (32, 32), "resnet50": (64, 8)}  # image size, batch per replica


def _emissary() -> tuple[str, str]:
    """Which emissary is PID 1 ("argoexec" or "standin"), and why not the real one."""
    if os.environ.get("SPOTTRAIN_EMISSARY") == "standin":
        return "standin", "SPOTTRAIN_EMISSARY=standin"
    if ARGOEXEC.exists():
        return "argoexec", ""
    return "standin", f"{ARGOEXEC} is not built (`make argoexec`, which needs Go)"


EMISSARY, WHY_STANDIN = _emissary()
if EMISSARY == "standin":
    warnings.warn(f"KFP-pod reproduction with the emissary stand-in: {WHY_STANDIN}", stacklevel=1)
# What `argoexec emissary` reads outside a cluster (cmd/argoexec/commands/emissary.go at
# v4.0.5): ARGO_CONTAINER_NAME (L35; the controller sets the container's name,
# workflow/controller/workflowpod.go L372), ARGO_INCLUDE_SCRIPT_OUTPUT (L36; "false"
# unless a script's output is used, workflowpod.go L342), /var/run/argo/template
# (L101-108; the init container writes it, workflow/executor/emissary/emissary.go
# L53-70; "{}" here: KFP's executor template saves no outputs, L255-269) and a writable
# /var/run/argo/ctr/ (L62, L50). ARGO_DEADLINE, ARGO_NODE_ID, ARGO_POD_NAME are not read
# by it, nor is the Kubernetes API called (clientConfig is used by agent, init, wait,
# data, resource: commands/*.go, executor.Init).
ARGO_ENV = {"ARGO_CONTAINER_NAME": "main", "ARGO_INCLUDE_SCRIPT_OUTPUT": "false"}
# workflowpod.go L435: what the controller puts before the user's command (log options
# at their defaults).
ARGOEXEC_CMD = [
    str(ARGOEXEC),
    "emissary",
    "--loglevel",
    "info",
    "--log-format",
    "text",
    "--gloglevel",
    "0",
    "--",
]


def compiled_train_command() -> list[str]:
    """The train executor's command + args from the committed GKE pipeline YAML."""
    spec = compiled_docs(compile_mod.COMPILED_DIR / compile_mod.GKE_YAML)[0]
    container = spec["deploymentSpec"]["executors"]["exec-train"]["container"]
    return [*container["command"], *container["args"]]


def _start(run, digits_dir, backbone="small_cnn", hold=0.0, env_extra=None):
    size, batch = SIZES[backbone]
    arguments = dict(
        data=dsl.Dataset(uri=digits_dir),
        checkpoint_dir=str(run / "checkpoints"),
        backbone=backbone,
        weights="none",
        image_size=size,
        batch_size_per_replica=batch,
        train_steps=100000,
        save_every_steps=100000,  # only the clock and the notice save
        extra_args=[
            "--log-every-steps",
            "1",
            "--save-every-seconds",
            str(SAVE_EVERY_S),
            "--threads",
            "1",
        ],  # fmt: skip
        expect_gpus=0,
    )
    run.mkdir(parents=True)
    user = fill_placeholders(
        compiled_train_command(), executor_input(train, arguments, run / "task"), run / "task"
    )
    launcher = [sys.executable, str(STANDINS / "kfp_launcher.py"), "--log-file", str(run / "log")]
    if EMISSARY == "argoexec":
        var_run_argo = run / "var-run-argo"
        var_run_argo.mkdir()
        (var_run_argo / "template").write_text("{}")
        env = chain_env({**ARGO_ENV, **(env_extra or {})})
        if hold:
            # Argo's own debug knob (emissary.go L232-243): after the child, wait for
            # ctr/main/after, which _finish creates.
            env["ARGO_DEBUG_PAUSE_AFTER"] = "true"
        cmd = [*ARGOEXEC_CMD, *launcher, "--", *user]
        return start_as_pid1(cmd, env, cwd=REPO, var_run_argo=var_run_argo)
    emissary = [sys.executable, str(STANDINS / "argo_emissary.py")]
    if hold:
        emissary += ["--hold-after-exit", str(hold)]
    return start_as_pid1([*emissary, "--", *launcher, "--", *user], chain_env(env_extra), cwd=REPO)


def _finish(chain, run, timeout, hold=0.0):
    """Reads the chain to its end; returns PID 1's exit code.

    A held stand-in lets itself go; a held argoexec is let go here, by creating
    ctr/main/after once PID 1 is the namespace's last live process (it no longer
    reaps, so the others stay zombies until it exits) or after ``hold`` seconds.
    """
    if hold and EMISSARY == "argoexec":
        after = run / "var-run-argo" / "ctr" / "main" / "after"
        deadline = time.monotonic() + hold
        pid1 = chain.pid1
        while not after.exists():
            assert chain.pump(0.2), chain.text()[-3000:]
            if time.monotonic() > deadline or namespace_processes(pid1) == [pid1]:
                after.touch()
    return chain.finish(timeout=timeout)


def _assert_exitcode_file(run, code):
    """argoexec also leaves the code where the wait container reads it (emissary.go L49-54)."""
    if EMISSARY == "argoexec":
        assert (run / "var-run-argo" / "ctr" / "main" / "exitcode").read_text() == str(code)


def test_dead_log_pipe_does_not_kill_the_trainer(digits_dir, tmp_path):
    """With time to finish (PID 1 held), the trainer saves although its stdout reader died."""
    run = tmp_path / "held"
    chain = _start(run, digits_dir, hold=60)
    chain.wait_for_step(10, timeout=180)
    os.kill(chain.pid1, signal.SIGTERM)
    code = _finish(chain, run, timeout=120, hold=60)
    # The launcher died of the signal: the pod's exit code is the emissary's 128 + 15.
    assert code == 143, chain.text()[-3000:]
    _assert_exitcode_file(run, code)
    rec = ledger_records(run / "checkpoints")[-1]
    # Every step line after the launcher's death hit a broken pipe; the trainer
    # still saved and closed its record itself.
    assert rec["outcome"] == "preempted" and rec["exit_code"] == exits.PREEMPTED, rec
    assert rec["steps_lost"] == 0 and rec["saved_step"] in checkpoint_steps(run / "checkpoints")


def test_a_save_on_the_metadata_notice_reaches_argo_marked_retryable(
    digits_dir, tmp_path, metadata
):
    """No SIGTERM: the trainer saves on GCE's notice and exits 143, the launcher makes it 1.

    The pod's exit code then says "crash"; the container's termination message (the
    file the kubelet creates and reads, spottrain/runtime/termination.py) says
    "retryable", and Argo's node message carries it to the retry expression
    (tests/system/kfp/test_argo_retry_controller.py plays that node).
    """
    server = metadata()
    log = tmp_path / "termination-log"
    log.touch()  # the kubelet's file, mounted before the container starts
    run = tmp_path / "notice"
    env = {metadata_notice.HOST_ENV: server.host, termination.PATH_ENV: str(log)}
    chain = _start(run, digits_dir, env_extra=env)
    chain.wait_for_step(5, timeout=300)
    server.preempt()
    code = _finish(chain, run, timeout=300)
    assert code == 1, chain.text()[-3000:]  # launcher_v2.go:715-716, main.go:56-60
    _assert_exitcode_file(run, code)
    rec = ledger_records(run / "checkpoints")[-1]
    assert rec["outcome"] == "preempted" and rec["exit_code"] == exits.PREEMPTED, rec
    assert rec["saved_step"] in checkpoint_steps(run / "checkpoints"), rec
    assert log.read_text().startswith(f"{termination.RETRYABLE_MARK} 143: trainer exited 143")


@pytest.mark.parametrize("backbone", BACKBONES)
@pytest.mark.parametrize("trial", range(TRIALS))
def test_cut_off_saves_on_notice_or_loses_at_most_the_save_interval(
    digits_dir, tmp_path, backbone, trial
):
    run = tmp_path / f"{backbone}-{trial}"
    chain = _start(run, digits_dir, backbone)
    rng = random.Random(f"{backbone}{trial}")
    # Past the first time-based save, at a random point of the save cycle.
    chain.wait_for_step(5, timeout=300)
    first = min(chain.step_times.values())
    while time.monotonic() < first + SAVE_EVERY_S * 1.5 + rng.uniform(0, SAVE_EVERY_S):
        assert chain.pump(0.2), chain.text()[-3000:]
    seen = chain.step
    os.kill(chain.pid1, signal.SIGTERM)
    sent = time.monotonic()
    code = _finish(chain, run, timeout=60)
    exit_after = time.monotonic() - sent
    ckpt = run / "checkpoints"
    # Emissary: 128 + SIGTERM from the launcher's death, whatever the trainer did.
    assert code == 143, chain.text()[-3000:]
    _assert_exitcode_file(run, code)
    # Poll of one second, plus one per orphan zombie reaped first (argoexec sometimes
    # reaps the launcher's orphaned children first; the stand-in never: its docstring).
    assert exit_after < 5, exit_after
    steps = checkpoint_steps(ckpt)
    assert steps, f"no complete checkpoint after {SAVE_EVERY_S * 1.5:.0f} s of time-based saves"
    latest = steps[-1]
    record = ledger_records(ckpt)[-1]
    saved_on_notice = record["outcome"] == "preempted"
    outcome = record["outcome"]
    if saved_on_notice:
        assert record["steps_lost"] == 0 and record["saved_step"] == latest >= seen
        lost_steps, lost_s = 0, 0.0
    else:
        # Killed: the retry closes it.
        assert record["outcome"] == "running", (record, chain.text()[-4000:])
        lost_steps = max(0, seen - latest)
        # From the step the newest complete checkpoint holds to the signal.
        lost_s = max(0.0, sent - chain.step_times.get(latest, sent))
        # One interval, plus the background write then in flight, plus a step.
        assert lost_s <= SAVE_EVERY_S + WRITE_AND_STEP_S, (lost_s, latest, seen)
        # The trainer heard the notice (the emissary signals the launcher's process
        # group, which holds it) about a second before the kill: its record says so,
        # written when the signal came, not at a step boundary it never reached.
        if backbone == "small_cnn":  # a ResNet50 step can outlast the second
            assert "notice_step" in record, record
        # What the next attempt writes into the ledger about this one, once it has
        # restored the newest checkpoint: a save finished after the notice counts.
        ledger = ledger_lib.Ledger(str(ckpt), True)
        ledger.begin(latest)
        ledger.set_start(latest)
        closed = ledger.records[-2]
        assert closed["outcome"] == ("preempted_unsaved" if "notice_step" in record else "killed")
        assert closed["saved_step"] == latest, (closed, latest)
        assert closed["steps_lost"] == max(0, closed["last_step"] - latest), closed
        outcome = closed["outcome"]
    print(
        f"kfp trial {backbone} {trial} ({EMISSARY}): SIGTERM after step {seen}; "
        f"{'saved on notice' if saved_on_notice else 'cut off'} (ledger: {outcome}); "
        f"newest checkpoint {latest}; "
        f"lost {lost_steps} step(s) / {lost_s:.1f} s; pod exit {code} {exit_after:.2f} s "
        "after the signal"
    )
