"""Training configuration: flags, defaults and fast validation.

Everything here is cheap: ``validate`` runs before TensorFlow builds a
strategy, so a bad config fails in seconds with a fatal exit code instead of
burning GPU time on retries.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass

from spottrain import storage
from spottrain.exits import ConfigError
from spottrain.trainer import task_loader

OPTIMIZERS = ("adam", "sgd", "rmsprop", "adamw")
# The engine's optimizer when --optimizer names none (a KerasTask then keeps its compiled one).
DEFAULT_OPTIMIZER = "adam"

# The step counter is an int64 and every step costs real time: far beyond any run.
MAX_STEPS = 10**10
MAX_EPOCHS = 10**6

# A resumed run must build exactly the same variables as the run that wrote
# the checkpoint; these engine fields and the task's (Task.compatibility) decide
# that. Others (learning rate, steps, batch size) may change between attempts,
# with a warning.
COMPATIBILITY_KEYS = ("optimizer", "mixed_precision")


@dataclass
class TrainConfig:
    """The engine's settings of one training run (see ``build_parser`` for the meaning).

    What is trained, and on what, is the task's: ``task`` and its own settings in
    ``task_args`` (the built-in image classifier's are also given as their own flags:
    :mod:`spottrain.tasks.image.flags`).
    """

    # What is trained (spottrain.trainer.task_api); empty: the built-in image classifier.
    task: str = ""
    task_args: str = "{}"
    # The run's input folder (a pipeline's copied data); the task decides what it holds.
    data: str = ""
    batch_size_per_replica: int = 32
    global_batch_size: int = 0
    train_steps: int = 0
    epochs: float = 0.0
    # Empty: a KerasTask's compiled optimizer, else DEFAULT_OPTIMIZER.
    optimizer: str = ""
    learning_rate: float = 1e-3
    warmup_steps: int = 0
    clip_norm: float = 0.0
    mixed_precision: bool = False
    save_every_steps: int = 100
    # Where a preemption notice cannot be acted on (a KFP pod on GKE gets about a
    # second), this bounds the loss; saves are asynchronous, so it costs little.
    save_every_seconds: float = 60.0
    keep_checkpoints: int = 3
    # -1: the newest checkpoint not marked diverged at a NaN stop (save_health).
    resume_from_step: int = -1
    log_every_steps: int = 10
    # Steps per compiled call (orbit's steps_per_loop, Keras' steps_per_execution);
    # 0: auto, chosen from the first steps' time so that a call stays short (a notice
    # is heard between calls).
    steps_per_loop: int = 1
    # XLA for the step: "auto" is model.fit's rule (on with a GPU and one device).
    jit_compile: str = "auto"
    checkpoint_dir: str = ""
    model_dir: str = ""
    tensorboard_dir: str = ""
    # 0: no per-collective timeout. MWMS's coordination service already turns a dead
    # or frozen peer into an error (its heartbeats), and a timeout costs a TensorFlow
    # timer thread per collective for its whole length (see distribution.create_strategy).
    collective_timeout: float = 0.0
    hang_timeout: float = 600.0
    startup_timeout: float = 1800.0
    no_supervisor: bool = False
    deterministic: bool = False
    # The checkpoint dir's writer lease (spottrain.trainer.lease): renewed every quarter,
    # taken over this long after its holder died.
    lease_seconds: float = 60.0
    check: bool = False
    seed: int = 0
    threads: int = 0
    price_per_hour: float = 0.0
    on_demand_price_per_hour: float = 0.0

    def to_dict(self) -> dict:
        """A JSON-friendly copy."""
        return dataclasses.asdict(self)

    def fingerprint(self) -> str:
        """A stable hash of the whole config, to recognise a retry of the same run."""
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def compatibility(self, task_part: dict) -> dict:
        """The fields a checkpoint depends on: the engine's and ``task_part``, the task's."""
        d = self.to_dict()
        out = {k: d[k] for k in COMPATIBILITY_KEYS}
        out["optimizer"] = self.optimizer or DEFAULT_OPTIMIZER  # as before it could be empty
        if self.task:  # only then: run configs written before tasks existed stay valid
            out["task"] = self.task
        return {**out, **task_part}


# --steps-per-loop auto: the seconds of steps one call may take (a notice waits for it).
AUTO_LOOP_SECONDS = 0.5
MAX_STEPS_PER_LOOP = 10_000


def _steps_per_loop(raw: str) -> int:
    """``auto`` is 0; else a whole number of steps (argparse names the flag on error)."""
    if raw.strip().lower() == "auto":
        return 0
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if not 1 <= n <= MAX_STEPS_PER_LOOP:
        raise argparse.ArgumentTypeError(
            f"{raw!r} must be auto or a whole number of steps in 1..{MAX_STEPS_PER_LOOP}"
        )
    return n


class _Parser(argparse.ArgumentParser):
    """argparse that raises ConfigError (fatal exit code) instead of exiting 2."""

    def error(self, message):
        raise ConfigError(message)


def build_parser() -> argparse.ArgumentParser:
    """The trainer's command line; every flag maps to a TrainConfig field."""
    d = TrainConfig()
    p = _Parser(
        prog="python -m spottrain.trainer.task",
        description=(
            "Fault-tolerant training (MWMS, resumable) of a task: the built-in image "
            "classifier, or --task <module>:<Class>."
        ),
    )
    task = p.add_argument_group("task")
    task.add_argument(
        "--task",
        default=d.task,
        help="What to train: <module>:<Class> of a spottrain.trainer.task_api.Task subclass "
        "(default: the built-in image classifier, configured by the flags below).",
    )
    task.add_argument(
        "--task-args", default=d.task_args, help="The task's own settings, a JSON object."
    )
    task.add_argument(
        "--data",
        default=d.data,
        help="The run's input folder, local or gs:// (a pipeline's copied data); the task "
        "decides what it holds.",
    )
    if own := task_loader.default_task_flags():
        own.add(p)
    opt = p.add_argument_group("optimisation")
    opt.add_argument(
        "--mixed-precision",
        action="store_true",
        help="mixed_float16 compute (GPU Tensor Cores) with loss scaling.",
    )
    opt.add_argument("--batch-size-per-replica", type=int, default=d.batch_size_per_replica)
    opt.add_argument(
        "--global-batch-size",
        type=int,
        default=d.global_batch_size,
        help="Alternative to --batch-size-per-replica; must divide by replicas. Wins over a "
        "KerasTask's fit() batch_size.",
    )
    opt.add_argument(
        "--train-steps",
        type=int,
        default=d.train_steps,
        help="Total optimizer steps of the whole run (across restarts). Without it or "
        "--epochs, a KerasTask's fit() epochs say how long.",
    )
    opt.add_argument(
        "--epochs",
        type=float,
        default=d.epochs,
        help="Alternative to --train-steps, converted with the dataset size (a KerasTask's: "
        "its steps_per_epoch, or examples // global batch); replaces fit()'s epochs.",
    )
    opt.add_argument(
        "--optimizer",
        default=d.optimizer,
        help=f"One of {', '.join(OPTIMIZERS)} (default: a KerasTask's compiled optimizer, "
        f"else {DEFAULT_OPTIMIZER}).",
    )
    opt.add_argument("--learning-rate", type=float, default=d.learning_rate)
    opt.add_argument(
        "--warmup-steps",
        type=int,
        default=d.warmup_steps,
        help="Linear learning-rate warmup (helps against early NaN losses).",
    )
    opt.add_argument(
        "--clip-norm",
        type=float,
        default=d.clip_norm,
        help="Clip gradients to this global norm (0: off).",
    )
    opt.add_argument("--seed", type=int, default=d.seed)
    ft = p.add_argument_group("fault tolerance and outputs")
    ft.add_argument("--save-every-steps", type=int, default=d.save_every_steps)
    ft.add_argument(
        "--save-every-seconds",
        type=float,
        default=d.save_every_seconds,
        help=(
            "Also save (asynchronously) when this much time passed since the last save "
            "(0: off). Bounds the loss when a preemption kills before the notice save."
        ),
    )
    ft.add_argument("--keep-checkpoints", type=int, default=d.keep_checkpoints)
    ft.add_argument(
        "--resume-from-step",
        type=int,
        default=d.resume_from_step,
        help="Resume from the checkpoint of this step (0: start afresh), moving newer ones "
        "into quarantine/; once per setting (-1, the default: the newest checkpoint not "
        "marked diverged at a NaN stop).",
    )
    ft.add_argument("--log-every-steps", type=int, default=d.log_every_steps)
    speed = p.add_argument_group("speed")
    speed.add_argument(
        "--steps-per-loop",
        type=_steps_per_loop,
        default=d.steps_per_loop,
        help="Steps run in one compiled call, the vote taken inside it so every worker "
        "still stops and saves at the same step (at most one call after a notice); "
        f"'auto': as many as take about {AUTO_LOOP_SECONDS:g} s.",
    )
    speed.add_argument(
        "--jit-compile",
        choices=("auto", "on", "off"),
        default=d.jit_compile,
        help="XLA for the training step; auto: as model.fit, on with a GPU and one device.",
    )
    ft.add_argument(
        "--checkpoint-dir",
        default=None,
        help="Persistent dir (gs:// or /gcs/ in production); default $AIP_CHECKPOINT_DIR.",
    )
    ft.add_argument("--model-dir", default=None, help="Final model; default $AIP_MODEL_DIR.")
    ft.add_argument(
        "--tensorboard-dir",
        default=None,
        help="TensorBoard logs; default $AIP_TENSORBOARD_LOG_DIR.",
    )
    ft.add_argument(
        "--collective-timeout",
        type=float,
        default=d.collective_timeout,
        help="Seconds a collective may wait for a peer before the worker gives up "
        "(0, the default: no timeout; a dead or frozen peer is found by the coordination "
        "service's heartbeats within ~10 s). Each timed collective holds a thread this long.",
    )
    ft.add_argument(
        "--hang-timeout",
        type=float,
        default=d.hang_timeout,
        help="Dump stacks and exit 171 (retryable) when no step finishes for this long "
        "(at least 10 s; a save the step waits for gets --startup-timeout).",
    )
    ft.add_argument(
        "--startup-timeout",
        type=float,
        default=d.startup_timeout,
        help="The same before the first step (covers a peer that never arrives).",
    )
    task.add_argument(
        "--check",
        action="store_true",
        help="Only check that the task imports, builds and fits one batch (CPU, seconds); "
        "train nothing, write nothing.",
    )
    ft.add_argument(
        "--lease-seconds",
        type=float,
        default=d.lease_seconds,
        help="The checkpoint dir's writer lease: one run writes it at a time; a holder "
        "that died is taken over after this; a second run waits 1.25x this, then exits "
        "(at most 86400).",
    )
    ft.add_argument(
        "--deterministic",
        action="store_true",
        help="Require bit-identical resumes: first check that the task's batch of a step "
        "is the same when its pipeline starts there (as a resume does), else exit 64; and "
        "make TensorFlow's ops deterministic (enable_op_determinism: slower on GPUs).",
    )
    ft.add_argument(
        "--no-supervisor",
        action="store_true",
        help="Train in this process, without the hang-watchdog supervisor process.",
    )
    ft.add_argument(
        "--threads",
        type=int,
        default=d.threads,
        help="TF intra/inter-op threads per process (0: TF default).",
    )
    ft.add_argument(
        "--price-per-hour",
        type=float,
        default=d.price_per_hour,
        help="$/hour of one worker as paid (spot): the ledger's spent and lost use it "
        "instead of the price catalog (docs/cost.md).",
    )
    ft.add_argument(
        "--on-demand-price-per-hour",
        type=float,
        default=d.on_demand_price_per_hour,
        help="$/hour of one on-demand worker: what an on-demand attempt paid, and what "
        "saved compares against.",
    )
    return p


def parse_args(argv: list[str], env_dirs: dict[str, str]) -> TrainConfig:
    """Parses flags into a TrainConfig; output dirs fall back to ``env_dirs``.

    The built-in task's own flags (:mod:`spottrain.tasks.image.flags`) become keys
    of ``task_args``.

    Raises:
        ConfigError: unknown flag or a value of the wrong type.
    """
    ns = build_parser().parse_args(argv)
    values = vars(ns)
    for key in ("checkpoint_dir", "model_dir", "tensorboard_dir"):
        if values[key] is None:
            values[key] = env_dirs.get(key, "")
    if own := task_loader.default_task_flags():
        own.merge(values)
    return TrainConfig(**values)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def validate(cfg: TrainConfig, outputs: bool = True) -> None:
    """Checks every value that does not need data or TensorFlow; raises ConfigError.

    Args:
        cfg: The parsed flags.
        outputs: Require the checkpoint and model dirs (``--check`` writes nothing
            and trains one step, so it checks them only when given).
    """
    # No TensorFlow: the task's module is not imported here.
    from spottrain.trainer import task_loader

    module, cls, args = task_loader.check_spec(cfg.task, cfg.task_args)
    own = task_loader.default_task_flags()
    if f"{module}:{cls}" == task_loader.DEFAULT_TASK and own:
        own.check(args, cfg.data)
    _require(
        not cfg.optimizer or cfg.optimizer in OPTIMIZERS,
        f"--optimizer {cfg.optimizer!r} is unknown; choose one of {', '.join(OPTIMIZERS)}",
    )
    _require(
        cfg.batch_size_per_replica > 0,
        f"--batch-size-per-replica {cfg.batch_size_per_replica} must be positive",
    )
    _require(
        cfg.global_batch_size >= 0, f"--global-batch-size {cfg.global_batch_size} must be positive"
    )
    # Neither is fine for a task of the user's: a KerasTask's fit() may say its epochs
    # (run_length.of decides at build, where the task is loaded; a plain Task without
    # either stops there). The built-in image task is a plain Task: refused here, at once.
    _require(
        not (cfg.train_steps > 0 and cfg.epochs > 0),
        f"give at most one of --train-steps ({cfg.train_steps}) or --epochs ({cfg.epochs:g})",
    )
    _require(
        cfg.train_steps > 0
        or cfg.epochs > 0
        or not outputs
        or f"{module}:{cls}" != task_loader.DEFAULT_TASK,
        f"give --train-steps ({cfg.train_steps}) or --epochs ({cfg.epochs:g}), positive: "
        "the built-in image task has no fit() to say how long to train",
    )
    _require(
        0 <= cfg.train_steps <= MAX_STEPS,
        f"--train-steps {cfg.train_steps} must be in 1..{MAX_STEPS}",
    )
    _require(
        math.isfinite(cfg.epochs) and 0 <= cfg.epochs <= MAX_EPOCHS,
        f"--epochs {cfg.epochs} must be a finite number in (0, {MAX_EPOCHS}]",
    )
    _require(0 <= cfg.seed < 2**32, f"--seed {cfg.seed} must be in 0..{2**32 - 1}")
    _require(
        math.isfinite(cfg.learning_rate) and 0 < cfg.learning_rate < 10,
        f"--learning-rate {cfg.learning_rate} must be in (0, 10)",
    )
    _require(0 <= cfg.warmup_steps <= MAX_STEPS, f"--warmup-steps {cfg.warmup_steps} must be >= 0")
    _require(
        math.isfinite(cfg.clip_norm) and cfg.clip_norm >= 0,
        f"--clip-norm {cfg.clip_norm} must be >= 0",
    )
    _require(
        0 < cfg.save_every_steps <= MAX_STEPS,
        f"--save-every-steps {cfg.save_every_steps} must be positive",
    )
    _require(
        math.isfinite(cfg.save_every_seconds) and cfg.save_every_seconds >= 0,
        f"--save-every-seconds {cfg.save_every_seconds} must be a finite number >= 0",
    )
    _require(
        cfg.keep_checkpoints >= 2,
        f"--keep-checkpoints {cfg.keep_checkpoints} must be >= 2 "
        "(a corrupt latest checkpoint needs a previous one to fall back to)",
    )
    _require(
        -1 <= cfg.resume_from_step <= MAX_STEPS,
        f"--resume-from-step {cfg.resume_from_step} must be a step >= 0 (or -1: the newest)",
    )
    _require(cfg.log_every_steps > 0, f"--log-every-steps {cfg.log_every_steps} must be positive")
    _require(
        math.isfinite(cfg.collective_timeout) and cfg.collective_timeout >= 0,
        f"--collective-timeout {cfg.collective_timeout} must be a finite number of seconds "
        ">= 0 (0: none)",
    )
    for flag, seconds in (
        ("--hang-timeout", cfg.hang_timeout),
        ("--startup-timeout", cfg.startup_timeout),
        ("--lease-seconds", cfg.lease_seconds),
    ):
        _require(
            math.isfinite(seconds) and seconds > 0,
            f"{flag} {seconds} must be a finite number of seconds > 0",
        )
    _check_watch_bounds(cfg)
    _require(0 <= cfg.threads <= 1024, f"--threads {cfg.threads} must be in 0..1024")
    for flag, price in (
        ("--price-per-hour", cfg.price_per_hour),
        ("--on-demand-price-per-hour", cfg.on_demand_price_per_hour),
    ):
        _require(math.isfinite(price) and price >= 0, f"{flag} {price} must be >= 0")
    _require(
        bool(cfg.checkpoint_dir) or not outputs,
        "no checkpoint dir: pass --checkpoint-dir or set AIP_CHECKPOINT_DIR",
    )
    _require(
        bool(cfg.model_dir) or not outputs, "no model dir: pass --model-dir or set AIP_MODEL_DIR"
    )
    for flag, path in (
        ("--checkpoint-dir", cfg.checkpoint_dir),
        ("--model-dir", cfg.model_dir),
        ("--tensorboard-dir", cfg.tensorboard_dir),
        ("--data", cfg.data),
    ):
        problem = storage.url_problem(path)
        _require(problem is None, f"{flag} {path!r}: {problem}")


# The shortest step timeout: the watchdog looks twice a second, and a step that starts
# a background save or restores takes seconds even for a small model. (A save a step
# waits for, the final one, is watched with --startup-timeout: heartbeat.Heartbeat.saving.)
MIN_HANG_SECONDS = 10.0


def _check_watch_bounds(cfg: TrainConfig) -> None:
    """Bounds of the watchdog's and the lease's times that a run could not survive."""
    from spottrain.trainer.lease import MAX_SECONDS

    _require(
        cfg.hang_timeout >= MIN_HANG_SECONDS,
        f"--hang-timeout {cfg.hang_timeout:g} is shorter than a step that saves can take: "
        f"give at least {MIN_HANG_SECONDS:.0f} seconds",
    )
    _require(
        cfg.lease_seconds <= MAX_SECONDS,
        f"--lease-seconds {cfg.lease_seconds:g} must be at most {MAX_SECONDS:.0f} (a day): a "
        "holder that died keeps the checkpoint dir that long",
    )


def global_batch(cfg: TrainConfig, num_replicas: int) -> int:
    """Global batch = per-replica batch x replicas, or the checked --global-batch-size."""
    if cfg.global_batch_size:
        _require(
            cfg.global_batch_size % num_replicas == 0,
            f"--global-batch-size {cfg.global_batch_size} is not divisible by the "
            f"{num_replicas} replicas in sync",
        )
        return cfg.global_batch_size
    return cfg.batch_size_per_replica * num_replicas


def steps_for_epochs(epochs: float, num_train: int, global_batch: int) -> int:
    """Converts --epochs into a whole number of steps (at least one)."""
    return max(1, math.ceil(epochs * num_train / global_batch))
