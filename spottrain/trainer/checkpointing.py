"""Checkpoint layout and life cycle; the only module that knows the directories.

Layout of ``--checkpoint-dir`` (written by the chief only)::

    ckpt-<step>.index / .data-*   tf.train.Checkpoint files, numbered by global step
    checkpoint                     CheckpointManager's state file
    run_config.json                the config that created the checkpoints
    lease.json                     the writer lease: which run writes here now (lease.py)
    saves.json                     the kept saves' losses, diverged ones marked (save_health)
    FATAL.json                     present after a fatal error (see record_fatal)
    quarantine/                    unreadable or skipped checkpoints moved aside, never deleted
    diagnostics/                   hang stack dumps, noted notices (any worker; names per worker)
    tensorboard/                   TensorBoard logs when no other dir is given

Why workers write elsewhere: under MultiWorkerMirroredStrategy saving runs
collective ops, so *every* worker must call save at the same step. If they all
wrote to the same directory they would race on the same files; so the chief
writes the real directory and each other worker writes a private temporary
directory (keeping only its newest copy) that is deleted at the end.

Saving and restoring (the chief/worker split, asynchronous saves) is
:mod:`spottrain.trainer.checkpoint_store`'s; this module names the files.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time

from spottrain import diagnostics, fileio, storage
from spottrain.exits import (
    FATAL_CONFIG,
    UNAVAILABLE,
    ConfigError,
    DirBusy,
    FailedBefore,
    NotTheWriter,
    Unwritable,
)
from spottrain.trainer.config import TrainConfig
from spottrain.trainer.distribution import Cluster, default_dirs

log = logging.getLogger(__name__)

RUN_CONFIG = "run_config.json"
TENSORBOARD = "tensorboard"
FATAL_MARKER = "FATAL.json"
# Where the pods of a JobSet-engine run write the model (its launcher copies it into the
# KFP Model artifact): the launcher's local artifact folder is not theirs to write.
JOB_MODEL = "model"
_CKPT_RE = re.compile(r"ckpt-(\d+)\.index$")


def default_tensorboard_dir(checkpoint_dir: str) -> str:
    """TensorBoard logs beside the checkpoints, when neither a flag nor Vertex names a dir.

    The checkpoint dir is the one folder every platform gives us that is
    persistent and belongs to this run, and the curves of every attempt then
    continue in one place.
    """
    return fileio.join(checkpoint_dir, TENSORBOARD) if checkpoint_dir else ""


def tensorboard_dir(flag: str, checkpoint_dir: str, environ: dict | None = None) -> str:
    """The run's TensorBoard dir, for the trainer that writes it and the report that reads it.

    ``--tensorboard-dir``, else Vertex's ``AIP_TENSORBOARD_LOG_DIR``, else
    :func:`default_tensorboard_dir`.
    """
    return (
        flag or default_dirs(environ)["tensorboard_dir"] or default_tensorboard_dir(checkpoint_dir)
    )


def job_model_dir(checkpoint_dir: str) -> str:
    """The ``--model-dir`` of a JobSet-engine run's pods, beside its checkpoints."""
    return fileio.join(checkpoint_dir, JOB_MODEL)


def diagnostics_path(cfg: TrainConfig, cluster: Cluster, kind: str) -> str:
    """Where a worker writes a diagnostic file (e.g. a hang's stack dump).

    Unlike checkpoints, every worker writes here, each under its own name, so
    that the dump of a stuck non-chief worker survives its pod too.
    """
    return diagnostics.path(cfg.checkpoint_dir, kind, cluster.name, time.strftime("%Y%m%d-%H%M%S"))


def check_output_dirs(cfg: TrainConfig, cluster: Cluster) -> None:
    """Fails before any training when the chief cannot write its checkpoint, model or TB dir.

    Otherwise a read-only or misspelt model dir would only fail after every step
    was paid for. Writes and removes one small file in each.

    Raises:
        Unwritable: naming the dir (or AIP_TENSORBOARD_LOG_DIR) and the reason.
    """
    if not cluster.is_chief:
        return  # the others write private temp dirs
    tensorboard = "--tensorboard-dir"
    if cfg.tensorboard_dir and cfg.tensorboard_dir == os.environ.get("AIP_TENSORBOARD_LOG_DIR"):
        tensorboard = "AIP_TENSORBOARD_LOG_DIR"  # Vertex's, not a flag the user typed
    for flag, directory in (
        ("--checkpoint-dir", cfg.checkpoint_dir),
        ("--model-dir", cfg.model_dir),
        (tensorboard, cfg.tensorboard_dir),
    ):
        if not directory:
            continue
        try:
            fileio.probe_writable(directory)
        except Exception as e:  # noqa: BLE001 - OSError or a TF error for gs://, both fatal here
            reason = getattr(e, "strerror", None) or str(e).strip().splitlines()[0][:200]
            if storage.is_local(directory) and os.path.isfile(directory):
                reason = "it is a file, not a folder"
            raise Unwritable(f"{flag} {directory!r} is not writable: {reason}") from None


def acquire_lease(cfg: TrainConfig, cluster: Cluster):
    """The chief's writer lease on the checkpoint dir, renewing; ``None`` on other workers.

    Workers of the chief's gang share its lease (they write only private temp dirs
    and per-worker diagnostics). A live holder gets ``1.25 * --lease-seconds`` to let
    go: a dead one's lease has expired by then, and a terminating gang has ended.

    Raises:
        DirBusy: still held after the wait; exit 64 when a different run (other
            settings) holds it, 172 (retryable) when an attempt of this run does.
        NotTheWriter: storage refused (64) or unreachable (172).
    """
    from spottrain.trainer import lease as lease_lib

    if not cluster.is_chief:
        return None
    since = time.time()
    try:
        lease = lease_lib.Lease(cfg.checkpoint_dir, cfg.fingerprint(), cfg.lease_seconds)
        taken = lease.acquire(wait_seconds=1.25 * cfg.lease_seconds)
    except OSError:
        raise  # local: attempt.run names the path and the reason
    except lease_lib.LeaseHeld as held:
        same = held.holder.get("run") == cfg.fingerprint()
        raise DirBusy(
            UNAVAILABLE if same else FATAL_CONFIG,
            f"--checkpoint-dir {cfg.checkpoint_dir!r} is being written by "
            f"{'another attempt of this run' if same else 'another run'}: {held}; "
            + ("retry when it ends" if same else "use another checkpoint dir or wait for it"),
            since,
        ) from None
    except Exception as e:  # noqa: BLE001 - Cloud Storage: credentials, bucket, network
        fatal = lease_lib.refused(e)
        raise NotTheWriter(
            FATAL_CONFIG if fatal else UNAVAILABLE,
            f"storage {'refused' if fatal else 'unreachable'} taking the writer lease on "
            f"--checkpoint-dir {cfg.checkpoint_dir!r}: {type(e).__name__}: "
            f"{' '.join(str(e).split())[:300]}",
        ) from None
    if taken:
        log.warning(
            "took over the lease of %s (expired, or its process here ended)",
            lease_lib.describe(taken),
        )
    lease.start_renewing()
    return lease


def check_fatal_marker(cfg: TrainConfig) -> None:
    """Exits fast when this exact config already failed fatally.

    KFP retries every failure; without this a bad config would spend each retry
    re-reading data and building a model only to fail the same way again. The
    marker may also be a peer's of this same attempt (a worker that got there
    first), so the line says who wrote it and when rather than "a previous attempt".
    """
    marker = fileio.read_json(fileio.join(cfg.checkpoint_dir, FATAL_MARKER))
    if marker and marker.get("fingerprint") == cfg.fingerprint():
        when = marker.get("time")
        stamp = (
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
            if isinstance(when, (int, float))
            else "an unknown time"
        )
        raise FailedBefore(
            int(marker.get("exit_code", FATAL_CONFIG)),
            f"this config already failed fatally ({marker.get('by', 'a worker')} at "
            f"{stamp}): {marker.get('error')} "
            f"(fix the config, or delete {fileio.join(cfg.checkpoint_dir, FATAL_MARKER)})",
        )


def record_fatal(cfg: TrainConfig, cluster: Cluster, error: str, code: int) -> None:
    """Writes FATAL.json (the chief, or the deputy if none) so retries stop at once.

    The deputy too: a fatal error every worker hits (a task that does not import)
    may stop the deputy first, and the launcher or platform then stops the chief
    before it writes anything.
    """
    if not (cluster.is_chief or cluster.deputy) or not cfg.checkpoint_dir:
        return
    path = fileio.join(cfg.checkpoint_dir, FATAL_MARKER)
    try:
        if not cluster.is_chief and fileio.read_json(path) is not None:
            return  # the chief's (or an earlier) record stands
        fileio.write_json(
            path,
            {
                "fingerprint": cfg.fingerprint(),
                "error": error,
                "exit_code": code,
                "by": cluster.name,
                "time": time.time(),
            },
        )
    except Exception as e:  # noqa: BLE001 - best effort; the error itself matters more
        log.warning("could not record the fatal error in %s: %s", cfg.checkpoint_dir, e)


def check_run_config(cfg: TrainConfig, cluster: Cluster, task_part: dict) -> None:
    """Refuses to resume checkpoints written by an incompatible config; records ours.

    Args:
        cfg: The engine's settings.
        cluster: This worker's place (the chief records the config).
        task_part: The prepared task's ``compatibility()``.

    Raises:
        ConfigError: naming each field that differs from the stored run.
    """
    path = fileio.join(cfg.checkpoint_dir, RUN_CONFIG)
    stored = _read_run_config(path)
    if stored is not None:
        old = stored.get("compatibility", {})
        new = cfg.compatibility(task_part)
        diffs = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in new if old.get(k) != new[k]]
        if diffs:
            raise ConfigError(
                f"--checkpoint-dir {cfg.checkpoint_dir!r} holds a different run "
                f"({'; '.join(diffs)}); use a new checkpoint dir or the original settings"
            )
        changed = [k for k, v in cfg.to_dict().items() if stored.get("config", {}).get(k, v) != v]
        if changed:
            log.warning("resuming with changed settings: %s", ", ".join(sorted(changed)))
    if cluster.is_chief:
        fileio.write_json(
            path, {"compatibility": cfg.compatibility(task_part), "config": cfg.to_dict()}
        )


def _read_run_config(path: str) -> dict | None:
    """The stored run config; ``None`` when missing or unreadable, a wrong shape included.

    Valid JSON of another shape (a hand edit, another tool) is ignored and rewritten,
    as broken JSON is (``fileio.read_json``), not an AttributeError on every retry.
    """
    stored = fileio.read_json(path)
    if stored is None:
        return None
    if isinstance(stored, dict) and all(
        isinstance(stored.get(part), dict) for part in ("compatibility", "config")
    ):
        return stored
    shape = json.dumps(stored)[:80]
    log.warning("ignoring unreadable %s (not a run config: %s)", path, shape)
    return None


def list_checkpoints(directory: str) -> list[tuple[int, str]]:
    """(step, prefix) of every checkpoint in ``directory``, newest first.

    Reads the files themselves rather than only the ``checkpoint`` state file,
    which can be stale or truncated by a kill during a save.
    """
    gfile = fileio.gfile()
    if not gfile.isdir(directory):
        return []
    found = {}
    for name in gfile.listdir(directory):
        m = _CKPT_RE.match(name)
        if m:
            found[int(m.group(1))] = fileio.join(directory, name[: -len(".index")])
    return sorted(found.items(), reverse=True)
