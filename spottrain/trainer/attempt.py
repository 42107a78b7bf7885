"""One attempt of a training run: check, train, and close its record with an exit code.

The light supervisor runs :func:`check` (no TensorFlow, no data) before it starts
the trainer process, which runs :func:`run`. Both end an attempt the same way:
one log line, ``FATAL.json`` for a fatal error, the ledger record closed with the
outcome (see :mod:`spottrain.trainer.preemption` for the codes).
"""

from __future__ import annotations

import json
import logging
from typing import NamedTuple

from spottrain import exits, fileio
from spottrain import ledger as ledger_lib
from spottrain.exits import ConfigError, TrainerExit
from spottrain.storage import is_local, url_problem
from spottrain.trainer import (
    checkpointing,
    config,
    distribution,
    fit_end,
    process_setup,
    task_api,
    task_loader,
)
from spottrain.trainer.train_lib import Trainer

log = logging.getLogger("trainer")


def prepare(argv: list[str], environ: dict | None = None):
    """Reads the cluster and parses the flags; raises ConfigError.

    Returns:
        (config, cluster).
    """
    try:
        cluster = distribution.read_cluster(environ)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    cfg = config.parse_args(argv, distribution.default_dirs(environ))
    cfg.tensorboard_dir = checkpointing.tensorboard_dir(
        cfg.tensorboard_dir, cfg.checkpoint_dir, environ
    )
    return cfg, cluster


def _quick_checks(cfg: config.TrainConfig, cluster: distribution.Cluster, *, storage: bool) -> None:
    """The checks that need no data; raises ConfigError/TrainerExit.

    Args:
        cfg: The parsed flags.
        cluster: This worker's place in the cluster.
        storage: Also read the fatal marker and probe the output dirs (needs
            TensorFlow for gs:// dirs, so the light supervisor passes it only
            for local dirs).
    """
    config.validate(cfg)
    if storage:
        checkpointing.check_fatal_marker(cfg)
        checkpointing.check_output_dirs(cfg, cluster)


def validate_all(cfg: config.TrainConfig, cluster: distribution.Cluster) -> task_api.Task:
    """Fast checks, in order of cost, then the task is loaded and prepared; raises ConfigError."""
    _quick_checks(cfg, cluster, storage=True)
    return _validate_task(cfg, cluster)


def _validate_task(cfg: config.TrainConfig, cluster: distribution.Cluster) -> task_api.Task:
    task = load_and_prepare(cfg)
    task_part = task_loader.call_task(f"--task {cfg.task}: compatibility()", task.compatibility)
    checkpointing.check_run_config(cfg, cluster, task_part)
    return task


def start_trainer(cfg, cluster, ledger, stop=None, lease=None) -> Trainer:
    """Fast checks, then TensorFlow's settings and the strategy, then the task; raises.

    The task is built and prepared only once TensorFlow is configured and the gang
    formed (:mod:`spottrain.trainer.process_setup`), and so is its module imported
    when it creates TensorFlow objects at import (a vocabulary's ``StringLookup``):
    such a module then trains, with and without ``--threads``, on any number of
    workers. Any other module is imported first (``task_loader.preload``), so that one
    that does not import or lacks its class fails at once, peers or not.
    """
    _quick_checks(cfg, cluster, storage=True)
    process_setup.seed(cfg)  # a module-level np.random draw: the same in every process
    task = None
    if not task_loader.preload(cfg.task, cfg.task_args):
        log.info("--task %s creates TensorFlow objects at import: imported after set-up", cfg.task)
    else:
        # Prepared before the gang forms (a bad value costs no GPU time and no strategy)
        # unless prepare() itself starts TensorFlow: then again after the set-up.
        try:
            with task_loader.tensorflow_not_started():
                task = _validate_task(cfg, cluster)
        except task_loader.StartsTensorFlow:
            log.info("--task %s: prepare() starts TensorFlow: prepared after set-up", cfg.task)
    trainer = Trainer(cfg, cluster, task, ledger, stop=stop, lease=lease)
    trainer.start()
    if trainer.task is None:
        trainer.task = _validate_task(cfg, cluster)
    return trainer


def load_and_prepare(cfg: config.TrainConfig) -> task_api.Task:
    """The task of ``cfg``, loaded and prepared; its own failures are one ConfigError line."""
    task = task_loader.load_task(cfg.task, cfg.task_args, cfg)
    task_loader.call_task(f"--task {cfg.task}: prepare()", task.prepare)
    return task


def _ledger(
    cfg: config.TrainConfig, cluster: distribution.Cluster, writer: bool = False
) -> ledger_lib.Ledger:
    return ledger_lib.Ledger(
        cfg.checkpoint_dir,
        cluster.is_chief or writer,
        workers=cluster.num_workers,
        price_per_hour=cfg.price_per_hour,
        on_demand_price_per_hour=cfg.on_demand_price_per_hour,
    )


def record_start_hang(cfg: config.TrainConfig, since: float, waited: float) -> None:
    """On the deputy worker: records a hung start-up when the chief recorded none.

    A chief that never ran (its pod never scheduled, its process gone before the
    ledger) leaves its gang waiting in MWMS start-up until their supervisors stop
    them; without this, the attempt and what it cost would be missing from the
    ledger. Never raises: the exit code matters more.
    """
    try:
        cluster = distribution.read_cluster()
        if not cluster.deputy or not cfg.checkpoint_dir:
            return
        ledger = _ledger(cfg, cluster, writer=True)
        message = (
            f"the gang never took a step in {waited:.0f} s and its chief left no record "
            f"(seen by {cluster.name})"
        )
        if ledger.gang_never_formed(exits.HUNG, message, since, cfg.startup_timeout):
            log.warning("recorded the attempt in the ledger: %s", message)
    except Exception as e:  # noqa: BLE001
        log.warning("could not record the hung start-up in the ledger: %s", e)


def record_stopped_start(cfg: config.TrainConfig, since: float, reason: str, message: str) -> None:
    """On the chief: closes the record of an attempt its supervisor stopped on a notice.

    The trainer took no step and could not act on the notice itself (TensorFlow held
    Python's lock: the gang's start-up), so it could not close its record. Never
    raises: the exit code matters more.
    """
    try:
        cluster = distribution.read_cluster()
        if not cluster.is_chief or not _recordable(cfg):
            return
        rec = _ledger(cfg, cluster).close_start(since, exits.PREEMPTED, message, reason)
        if rec is not None:
            log.warning("recorded the attempt in the ledger: %s", rec["outcome"])
    except Exception as e:  # noqa: BLE001
        log.warning("could not record the stopped attempt in the ledger: %s", e)


def _stop(e: TrainerExit, cfg, cluster, ledger) -> int:
    """Logs the one line, records a fatal error for retries, closes the ledger record.

    ``cfg`` is ``None`` when the checkpoint dir itself is unusable (nothing is
    recorded there). A storage failure while recording is a warning: the exit
    code is what the orchestrator acts on.
    """
    level = logging.WARNING if exits.is_retryable(e.code) else logging.ERROR
    log.log(level, "exit %d: %s", e.code, e)
    if isinstance(e, exits.DirBusy) and ledger is not None:
        try:  # only its own record, merged into the holder's ledger
            ledger.refused(e.code, str(e), e.since)
        except Exception as err:  # noqa: BLE001 - the exit code is what matters
            log.warning("could not record the refused attempt: %s", err)
    if isinstance(e, exits.NotTheWriter):
        return e.code  # the dir is another writer's: record nothing else there
    # Not for an unwritable destination: once fixed, the same config must run; and
    # not again for the marker's own exit (its message would nest at every restart).
    skip = isinstance(e, (exits.Unwritable, exits.FailedBefore))
    if e.code in exits.FATAL and cfg is not None and cluster is not None and not skip:
        checkpointing.record_fatal(cfg, cluster, str(e), e.code)
    if ledger is not None:
        try:
            ledger.end(e.code, str(e))
        except Exception as err:  # noqa: BLE001 - the storage may be what failed
            log.warning("could not close the attempt's ledger record: %s", err)
    return e.code


def _close_unexpected(ledger, e: BaseException) -> None:
    """Closes the ledger record of an attempt that ends in a traceback (exit 1)."""
    if ledger is not None:
        try:
            ledger.end(1, f"{type(e).__name__}: {e}")
        except Exception as err:  # noqa: BLE001 - the traceback that follows matters more
            log.warning("could not close the attempt's ledger record: %s", err)


def _dirs(cfg) -> dict[str, str]:
    """The run's output dirs by flag, to name the one a storage error is in."""
    if cfg is None:
        return {}
    return {
        "--checkpoint-dir": cfg.checkpoint_dir,
        "--model-dir": cfg.model_dir,
        "--tensorboard-dir": cfg.tensorboard_dir,
    }


def _recordable(cfg) -> bool:
    """Whether the checkpoint dir can hold FATAL.json and the ledger at all."""
    return bool(cfg and cfg.checkpoint_dir) and url_problem(cfg.checkpoint_dir) is None


class Checked(NamedTuple):
    """What :func:`check` found: an exit code to stop with, or the parsed run."""

    code: int | None
    cfg: config.TrainConfig | None = None
    cluster: distribution.Cluster | None = None


def check(argv: list[str], environ: dict | None = None) -> Checked:
    """The checks that need neither data nor TensorFlow, for the supervisor to run first.

    A mistyped flag then costs well under a second instead of the trainer
    process's TensorFlow import; the outcome (exit code, FATAL.json, ledger
    record) is the same as when the trainer finds it.

    Returns:
        ``code`` to stop with, or ``code=None`` with the parsed flags and cluster
        (the supervisor takes its timeouts from them) when the trainer should start.
    """
    cfg = cluster = ledger = None
    try:
        cfg, cluster = prepare(argv, environ)
        # gs:// output dirs wait for the trainer process, which has TensorFlow.
        local = all(is_local(d) for d in _dirs(cfg).values())
        _quick_checks(cfg, cluster, storage=local)
    except TrainerExit as e:
        if not _recordable(cfg):
            cfg = None
        elif cluster is not None and e.code in exits.FATAL:
            try:
                ledger = _ledger(cfg, cluster)
            except Exception as err:  # noqa: BLE001 - report the config error, not this
                log.warning("could not open the attempt ledger: %s", err)
        return Checked(_stop(e, cfg, cluster, ledger))
    return Checked(None, cfg, cluster)


def run(argv: list[str], environ: dict | None = None, stop=None) -> int:
    """Runs one attempt; returns the exit code (see spottrain.trainer.preemption).

    Args:
        argv: The trainer's flags.
        environ: The environment to read the cluster from (``os.environ`` if None).
        stop: The notice flag the process installed first thing (a new one if None).
    """
    cfg = cluster = trainer = ledger = lease = None
    try:
        cfg, cluster = prepare(argv, environ)
        ledger = _ledger(cfg, cluster)
        if _recordable(cfg):
            # Before anything is written into the checkpoint dir (ledger, run config,
            # FATAL.json). The supervisor's check() refused bad flags already.
            lease = checkpointing.acquire_lease(cfg, cluster)
        trainer = start_trainer(cfg, cluster, ledger, stop=stop, lease=lease)
        trainer.build()
        final_step = trainer.train()
        fit_end.finalize(trainer.task, trainer.model)  # after the final save: fit's EMA weights
        metrics = trainer.evaluate()
        summary = trainer.export(final_step, metrics)
        log.info("done: %s", json.dumps({k: v for k, v in summary.items() if k != "class_names"}))
        ledger.end(exits.OK)
        trainer.finish()
        return exits.OK
    except TrainerExit as e:
        if trainer is not None and not isinstance(e, exits.NotTheWriter):
            trainer.settle_saves()
        return _stop(e, cfg if _recordable(cfg) else None, cluster, ledger)
    except Exception as e:
        # Out of space, read-only, permissions, storage unreachable: one table.
        failure = fileio.storage_failure(e, _dirs(cfg))
        if failure is None:
            _close_unexpected(ledger, e)
            raise
        return _stop(failure, cfg, cluster, ledger)
    finally:
        if trainer is not None:
            trainer.close()
        if lease is not None:
            lease.release()
