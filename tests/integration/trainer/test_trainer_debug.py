"""Hang watchdog and NaN guard, with real processes."""

from __future__ import annotations

import json
import os
import tempfile
import time

import pytest
from ports import held_port
from trainer_helpers import error_lines, ledger, run_module, startup_timeout_here, tiny_args

from spottrain import exits

pytestmark = pytest.mark.slow


def _alone_in_a_gang_of_two(task_type: str, digits_dir, out, startup_timeout: float):
    """Runs one task of a chief + worker cluster whose other task never starts (its
    port held, refusing connections: no other process can listen there meanwhile)."""
    from spottrain.trainer.launch import free_ports

    with held_port() as absent:
        own = free_ports(1)[0]
        chief, worker = (own, absent) if task_type == "chief" else (absent, own)
        tf_config = json.dumps(
            {
                "cluster": {"chief": [f"127.0.0.1:{chief}"], "worker": [f"127.0.0.1:{worker}"]},
                "task": {"type": task_type, "index": 0},
            }
        )
        return run_module(
            "spottrain.trainer.task",
            tiny_args(digits_dir, out, startup_timeout=startup_timeout),
            extra_env={"TF_CONFIG": tf_config},
            timeout=startup_timeout + 120,
        )


def test_watchdog_dumps_the_blocking_frame_when_a_peer_never_arrives(digits_dir, tmp_path):
    """A chief whose worker never starts blocks in MWMS start-up forever without the watchdog."""
    out = tmp_path / "run"
    timeout = startup_timeout_here()
    proc, seconds = _alone_in_a_gang_of_two("chief", digits_dir, out, timeout)
    assert proc.returncode == exits.HUNG, proc.stdout[-3000:]
    assert seconds < 2 * timeout, f"exited after {seconds:.1f} s ({timeout} s timeout)"
    assert "HANG: no training step finished" in proc.stdout
    dumps = list((out / "checkpoints" / "diagnostics").glob("hang-chief-0-*.txt"))
    assert len(dumps) == 1
    text = dumps[0].read_text()
    # The stack names where it is stuck: creating the multi-worker strategy.
    assert "stacks (py-spy)" in text, text[:3000]
    assert "create_strategy" in text and "collective_all_reduce_strategy" in text, text[:3000]
    # The killed attempt could not close its ledger record; the next one does, as a hang.
    proc, _ = run_module("spottrain.trainer.task", tiny_args(digits_dir, out, train_steps=2))
    assert proc.returncode == 0, proc.stdout[-3000:]
    hang, success = ledger(out)
    assert (hang["outcome"], success["outcome"]) == ("hang", "success")
    # From the record's opening (TensorFlow imported) to the supervisor's kill (the
    # dump), not 0 s as before: no step ever updated the record.
    assert 2 <= hang["seconds"] <= seconds + 1, hang


def test_a_resume_trains_with_the_flags_learning_rate_not_the_checkpoints():
    """After a NaN stop the advice is a lower --learning-rate; a float learning rate is
    an optimizer variable that the restore brings back, so the engine sets the
    flags' rate over it (a checkpoint written at 5.0, resumed with 0.003)."""
    import tensorflow as tf

    from spottrain.trainer import config, optimizer

    def trained(lr):
        cfg = config.TrainConfig(learning_rate=lr)
        opt = optimizer.build_optimizer(cfg)
        var = tf.Variable([1.0, 2.0])
        opt.apply_gradients([(tf.constant([0.5, 0.5]), var)])
        return cfg, opt, tf.train.Checkpoint(optimizer=opt, var=var)

    _, _, old = trained(5.0)
    path = old.save(os.path.join(tempfile.mkdtemp(), "ckpt"))
    cfg, opt, new = trained(0.003)
    new.restore(path).assert_consumed()
    assert float(opt.learning_rate) == 5.0  # what the restore alone leaves
    assert optimizer.apply_learning_rate(opt, cfg) is True
    assert abs(float(opt.learning_rate) - 0.003) < 1e-9
    assert optimizer.apply_learning_rate(opt, cfg) is False  # already the flags'
    warm = config.TrainConfig(learning_rate=0.003, warmup_steps=10)  # a schedule: not restored
    assert optimizer.apply_learning_rate(optimizer.build_optimizer(warm), warm) is False


def test_nan_loss_stops_fatal_and_keeps_last_good_checkpoint(digits_dir, tmp_path):
    out = tmp_path / "run"
    # float16 activations overflow within a few steps at this learning rate.
    args = tiny_args(
        digits_dir,
        out,
        mixed_precision=True,
        learning_rate=5.0,
        train_steps=300,
        save_every_steps=1,
        log_every_steps=1,
    )
    proc, _ = run_module("spottrain.trainer.task", args)
    assert proc.returncode == exits.FATAL_NAN, proc.stdout[-3000:]
    (error,) = error_lines(proc)
    assert "loss is nan" in error.lower() or "loss is inf" in error.lower()
    assert "--learning-rate (now 5)" in error and "--clip-norm" in error
    assert "--warmup-steps" in error and "--mixed-precision" in error
    bad_step = int(error.split(" at step ")[1].split(";")[0])
    rec = ledger(out)[-1]
    assert rec["outcome"] == "nan" and rec["last_step"] == bad_step
    # Nothing was saved at or after the NaN step.
    saved = sorted(int(p.name[5:-6]) for p in (out / "checkpoints").glob("ckpt-*.index"))
    assert saved and saved[-1] < bad_step and rec["saved_step"] == saved[-1]
    # The retry does not burn time: FATAL.json stops it at once with the same code.
    again, seconds = run_module("spottrain.trainer.task", args)
    assert again.returncode == exits.FATAL_NAN
    assert "this config already failed fatally" in error_lines(again)[0]
    assert seconds < 30
    # Every later restart (Vertex restarts a worker up to 5 times, its job up to 3)
    # says the same, once: the marker keeps the first error, not the last message.
    third, _ = run_module("spottrain.trainer.task", args)
    (line,) = error_lines(third)
    assert line.count("this config already failed fatally") == 1, line
    assert "loss is nan" in line.lower()


def test_frozen_worker_survivor_gives_up_and_frozen_one_is_dumped(digits_dir, tmp_path):
    """A live-but-stuck peer (SIGSTOP): the coordination service's heartbeats fail the
    chief's collective (no collective timeout is set), the frozen worker's supervisor
    dumps its stacks and stops it. Nothing waits forever."""
    from spottrain.trainer import launch

    out = tmp_path / "run"
    hang_timeout = 15
    args = tiny_args(
        digits_dir,
        out,
        train_steps=400,
        hang_timeout=hang_timeout,
    )
    launcher = launch.ProcessLauncher(
        2, args, preempt_at_step=20, signal_name="STOP", preempt_worker="1", grace=120
    )
    result = launcher.run()
    assert result.chaos and result.chaos["worker"] == "worker-0", result
    by_name = {w.name: w for w in launcher.workers}
    chief, frozen = by_name["chief-0"], by_name["worker-0"]
    assert chief.code == exits.PEER_LOST, result.worker_codes
    assert frozen.code == exits.HUNG, result.worker_codes
    assert chief.ended_at - result.chaos["at"] < 30  # heartbeats: ~10 s, then the exit
    assert frozen.ended_at - result.chaos["at"] < 2 * hang_timeout + 10
    (dump,) = (out / "checkpoints" / "diagnostics").glob("hang-worker-0-*.txt")
    assert "stacks (py-spy)" in dump.read_text() and "train" in dump.read_text()


def test_an_attempt_whose_chief_never_started_is_still_recorded(digits_dir, tmp_path):
    """The chief never runs (its pod never scheduled): the first non-chief worker waits
    in MWMS start-up until its supervisor stops it (171) and, finding no record the
    chief opened, adds the attempt to the ledger with what it cost; the next attempt's
    chief keeps it and numbers its own after it."""
    out = tmp_path / "run"
    timeout = startup_timeout_here()
    began = time.time()
    proc, seconds = _alone_in_a_gang_of_two("worker", digits_dir, out, timeout)
    assert proc.returncode == exits.HUNG, proc.stdout[-3000:]
    (rec,) = ledger(out)
    assert rec["outcome"] == "hang" and rec["exit_code"] == exits.HUNG, rec
    assert "its chief left no record (seen by worker-0)" in rec["message"], rec
    assert rec["workers"] == 2 and rec["steps_lost"] == 0
    # From the worker's start to its supervisor's stop: the machines it held.
    assert timeout <= rec["seconds"] <= seconds + 1 and rec["started"] >= began - 1, rec
    proc, _ = run_module("spottrain.trainer.task", tiny_args(digits_dir, out, train_steps=2))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert [r["outcome"] for r in ledger(out)] == ["hang", "success"]


def test_a_port_another_process_holds_is_one_retryable_line(digits_dir, tmp_path):
    """CI saw a chief's port, released by the launcher's pick, taken before the chief
    bound it: TF's "Could not start gRPC server" traceback and exit 1. Now one line
    naming the address, and a retryable exit (the port may be free next time)."""
    with held_port() as own, held_port() as peer:
        tf_config = {
            "cluster": {"chief": [f"127.0.0.1:{own}"], "worker": [f"127.0.0.1:{peer}"]},
            "task": {"type": "chief", "index": 0},
        }
        timeout = startup_timeout_here()
        proc, _ = run_module(
            "spottrain.trainer.task",
            tiny_args(digits_dir, tmp_path / "run", startup_timeout=timeout),
            extra_env={"TF_CONFIG": json.dumps(tf_config)},
            timeout=timeout + 120,
        )
    assert proc.returncode == exits.UNAVAILABLE, proc.stdout[-3000:]
    said = [ln for ln in proc.stdout.splitlines() if "WARNING trainer: exit 172:" in ln]
    assert len(said) == 1 and f"127.0.0.1:{own}" in said[0], proc.stdout[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]


def test_the_local_launcher_picks_ports_outside_the_ephemeral_range():
    """Where no outgoing connection can take them between the pick and the bind."""
    from spottrain.trainer import local_cluster

    low = local_cluster._ephemeral_low()
    ports = local_cluster.free_ports(8)
    assert len(set(ports)) == 8 and all(1024 < p < low for p in ports), (ports, low)
