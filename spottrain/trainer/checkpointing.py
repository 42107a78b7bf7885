"""Checkpoint layout and life cycle; the only module that knows the directories.

Layout of ``--checkpoint-dir`` (written by the chief only)::

    ckpt-<step>.index / .data-*   tf.train.Checkpoint files, numbered by global step
    checkpoint                     CheckpointManager's state file
    run_config.json                the config that created the checkpoints
    lease.json                     the writer lease: which run writes here now (lease.py)
    FATAL.json                     present after a fatal error (see record_fatal)
    quarantine/                    unreadable checkpoints moved aside, never deleted
    diagnostics/                   hang stack dumps (any worker; names are per worker)
    tensorboard/                   TensorBoard logs when no other dir is given

Why workers write elsewhere: under MultiWorkerMirroredStrategy saving runs
collective ops, so *every* worker must call save at the same step. If they all
wrote to the same directory they would race on the same files; so the chief
writes the real directory and each other worker writes a private temporary
directory (keeping only its newest copy) that is deleted at the end.

Periodic saves are asynchronous (TF's ``experimental_enable_async_checkpoint``):
the step loop only waits for the variables to be copied to host memory, and the
files are written in a background thread. That is what makes frequent time-based
saves cheap, and frequent saves are what bound the loss where a preemption
notice cannot be acted on in time (a KFP pod on GKE: see README). Saves on a
preemption notice and at the last step wait until the files are complete.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import time

from spottrain.trainer import fileio
from spottrain.trainer.config import TrainConfig
from spottrain.trainer.distribution import Cluster
from spottrain.trainer.preemption import (
    FATAL_CONFIG,
    UNAVAILABLE,
    ConfigError,
    DirBusy,
    NotTheWriter,
    TrainerExit,
    Unwritable,
)

log = logging.getLogger(__name__)

RUN_CONFIG = "run_config.json"
TENSORBOARD = "tensorboard"
FATAL_MARKER = "FATAL.json"
# Where the pods of a Job-engine run write the model (its launcher copies it into the
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


def job_model_dir(checkpoint_dir: str) -> str:
    """The ``--model-dir`` of a Job-engine run's pods, beside its checkpoints."""
    return fileio.join(checkpoint_dir, JOB_MODEL)


def diagnostics_path(cfg: TrainConfig, cluster: Cluster, kind: str) -> str:
    """Where a worker writes a diagnostic file (e.g. a hang's stack dump).

    Unlike checkpoints, every worker writes here, each under its own name, so
    that the dump of a stuck non-chief worker survives its pod too.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return fileio.join(cfg.checkpoint_dir, f"diagnostics/{kind}-{cluster.name}-{stamp}.txt")


def has_diagnostics(checkpoint_dir: str, kind: str, since: float) -> bool:
    """Whether any worker wrote a ``kind`` diagnostic (see diagnostics_path) since ``since``."""
    pattern = fileio.join(checkpoint_dir, f"diagnostics/{kind}-*")
    return any(fileio.mtime(path) >= since for path in fileio.glob(pattern))


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
            if fileio.is_local(directory) and os.path.isfile(directory):
                reason = "it is a file, not a folder"
            raise Unwritable(f"{flag} {directory!r} is not writable: {reason}") from None


def quarantine(checkpoint_dir: str, path: str, suffix: str = "") -> str:
    """Moves the file ``path`` into ``<checkpoint_dir>/quarantine/`` (never deleted).

    Returns:
        Its new path: its name plus ``suffix``.
    """
    moved = fileio.join(checkpoint_dir, f"quarantine/{path.rsplit('/', 1)[-1]}{suffix}")
    fileio.move(path, moved)
    return moved


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
    """Exits fast when a previous attempt of this exact config failed fatally.

    KFP retries every failure; without this a bad config would spend each retry
    re-reading data and building a model only to fail the same way again.
    """
    marker = fileio.read_json(fileio.join(cfg.checkpoint_dir, FATAL_MARKER))
    if marker and marker.get("fingerprint") == cfg.fingerprint():
        raise TrainerExit(
            int(marker.get("exit_code", FATAL_CONFIG)),
            f"a previous attempt of this config failed fatally: {marker.get('error')} "
            f"(fix the config, or delete {fileio.join(cfg.checkpoint_dir, FATAL_MARKER)})",
        )


def record_fatal(cfg: TrainConfig, cluster: Cluster, error: str, code: int) -> None:
    """Writes FATAL.json (chief only) so retries of the same config stop at once."""
    if not cluster.is_chief or not cfg.checkpoint_dir:
        return
    try:
        fileio.write_json(
            fileio.join(cfg.checkpoint_dir, FATAL_MARKER),
            {
                "fingerprint": cfg.fingerprint(),
                "error": error,
                "exit_code": code,
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
    stored = fileio.read_json(path)
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


def _fix_keras_async_copy() -> None:
    """Lets TF's asynchronous checkpointing save Keras 3 variables more than once.

    Keras 3.x's TensorFlow ``Variable._copy_trackable_to_cpu`` creates a new
    ``tf.Variable`` on every call (keras/src/backend/tensorflow/core.py), and TF
    runs that copy inside a ``tf.function`` from the second save on
    (tensorflow/python/checkpoint/async_checkpoint_helper.py ``_copy_to_cpu``),
    which refuses variables created after the first call: the second async save
    raises ValueError. The fix creates the host copy once and assigns it after.
    Applied only while Keras still has that body (a test fails if it goes away).
    """
    import inspect

    from keras.src.backend.tensorflow import core

    method = core.Variable._copy_trackable_to_cpu
    if getattr(method, "_spottrain_fix", False):
        return
    if "tf.Variable(object_map[self.value])" not in inspect.getsource(method):
        return  # fixed upstream (or changed): leave it alone

    def _copy_trackable_to_cpu(self, object_map):
        import tensorflow as tf

        self.value._copy_trackable_to_cpu(object_map)
        if self not in object_map:
            object_map[self] = tf.Variable(object_map[self.value])
        else:
            object_map[self].assign(object_map[self.value])

    _copy_trackable_to_cpu._spottrain_fix = True
    core.Variable._copy_trackable_to_cpu = _copy_trackable_to_cpu


class CheckpointStore:
    """Saves and restores one tf.train.Checkpoint with the chief/worker split."""

    def __init__(self, cfg: TrainConfig, cluster: Cluster, checkpoint):
        import tensorflow as tf

        self.cfg = cfg
        self.cluster = cluster
        self.checkpoint = checkpoint
        self.real_dir = cfg.checkpoint_dir.rstrip("/")
        if cluster.is_chief:
            self.write_dir, keep = self.real_dir, cfg.keep_checkpoints
        else:
            # A worker's copy is only a by-product of taking part in the collective
            # save: keep its newest one (an async write may still be running).
            self.write_dir, keep = tempfile.mkdtemp(prefix=f"spottrain-{cluster.name}-"), 1
        if cluster.is_chief:  # it holds the dir's lease: no one else is writing there
            self._remove_leftovers()
        self._check_state_file()
        self.manager = tf.train.CheckpointManager(
            checkpoint, self.write_dir, max_to_keep=keep, checkpoint_name="ckpt"
        )
        _fix_keras_async_copy()
        self._async = tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True)
        self.last_save_seconds = 0.0
        # The newest step whose files are complete (None: none this attempt), and a
        # background save still writing.
        self.complete_step: int | None = None
        self._writing: int | None = None

    def restore_latest(self) -> int:
        """Restores the newest readable checkpoint; returns its step (0: fresh start).

        An unreadable checkpoint (truncated by a kill, corrupted upload) is
        skipped with a warning and, by the chief, moved to ``quarantine/`` so
        that later attempts do not trip on it again.
        """
        import tensorflow as tf

        for step, prefix in list_checkpoints(self.real_dir):
            try:
                self.checkpoint.restore(prefix).assert_existing_objects_matched()
            except (tf.errors.OpError, AssertionError, ValueError, IndexError, OSError) as e:
                reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e)
                log.warning(
                    "checkpoint %s is unreadable (%s); falling back to the previous one",
                    prefix,
                    reason,
                )
                self._quarantine(prefix)
                continue
            log.info("restored %s (step %d)", prefix, step)
            return step
        return 0

    def _remove_leftovers(self) -> None:
        """Removes what killed saves left: ``ckpt-N_temp/``, data without an index, temps.

        TF writes a save into ``<prefix>_temp/`` and renames the files into place
        at the end; its orphans "can be safely removed" (functional_saver.py,
        ``MultiDeviceSaver._save_with_shards``' comment). Data files without an
        index are a save cut between the two renames. Temp files of small-file
        writes (``<file>.tmp``, the state file's ``checkpoint.tmp<id>``) are
        removed once older than a lease: a refused run may be writing one now.
        """
        try:
            self._remove_partial("*")
            for path in fileio.glob(fileio.join(self.real_dir, "*.tmp*")):
                if time.time() - fileio.mtime(path) > self.cfg.lease_seconds:
                    fileio.remove(path)
                    log.info("removed %s, left by a write that was cut", path)
        except Exception as e:  # noqa: BLE001 - tidying up must not stop training
            log.warning("could not remove what a cut save left in %s: %s", self.real_dir, e)

    def _remove_partial(self, step: int | str) -> None:
        """Removes the temp folder and index-less data files of save ``step`` (``*``: all)."""
        indexed = {s for s, _ in list_checkpoints(self.real_dir)}
        for path in fileio.glob(fileio.join(self.real_dir, f"ckpt-{step}_temp")):
            fileio.remove(path)
            log.info("removed %s, left by a save that was cut", path)
        for path in fileio.glob(fileio.join(self.real_dir, f"ckpt-{step}.data-*")):
            m = re.search(r"ckpt-(\d+)\.data-", path)
            if m and int(m.group(1)) not in indexed:
                fileio.remove(path)
                log.info("removed %s, left by a save that was cut", path)

    def _check_state_file(self) -> None:
        """Moves an unparsable ``checkpoint`` state file aside (garbage from a crash).

        CheckpointManager parses it at construction and would raise (a
        UnicodeDecodeError or a text-format error: a traceback, exit 1). Without it
        the manager starts afresh, and :meth:`restore_latest` reads the checkpoint
        files themselves.
        """
        import tensorflow as tf

        state = fileio.join(self.write_dir, "checkpoint")
        if not fileio.exists(state):
            return
        try:
            # None for a text-format error (TF logs it and goes on), a raise for bytes
            # that are not UTF-8.
            if tf.train.get_checkpoint_state(self.write_dir) is not None:
                return
            reason = "not a checkpoint state"
        except Exception as e:  # noqa: BLE001 - any parse failure: the file is garbage
            reason = f"{type(e).__name__}: {' '.join(str(e).split())[:150]}"
        # Only the chief's dir can hold one: a worker's write_dir is a new temp dir.
        moved = quarantine(self.real_dir, state, f".{int(time.time())}")
        log.warning("the checkpoint state file is unreadable (%s); moved to %s", reason, moved)

    def _quarantine(self, prefix: str) -> None:
        if not self.cluster.is_chief:
            return
        try:
            for path in fileio.glob(f"{prefix}.*"):
                quarantine(self.real_dir, path)
        except Exception as e:  # noqa: BLE001 - quarantine is an optimisation
            log.warning("could not move %s aside: %s", prefix, e)

    def warm_up(self) -> None:
        """Pays the asynchronous path's one-time costs before training, not at a save.

        TF's helper allocates the host copies at its first save and traces its
        copy ``tf.function`` at the second (tensorflow/python/checkpoint/
        async_checkpoint_helper.py ``_write``: ``_ensure_initialized`` then
        ``_copy_to_cpu``), which took seconds for ResNet50 in the middle of the
        step loop, delaying the first restorable checkpoints. Doing both here
        (every worker, as the copy may read mirrored variables) leaves each
        periodic save with only the copy itself. No file is written.
        """
        helper = self.checkpoint._async_checkpointer()
        if not helper._initialized:
            helper._ensure_initialized()
        helper._copy_to_cpu()

    def save(self, step: int, *, wait: bool = True) -> str:
        """Saves at ``step`` on every worker (a collective); returns the chief's path.

        Args:
            step: The global step, used as the checkpoint number.
            wait: Save synchronously: return once the files are complete.
                ``False`` returns once the variables are copied to host memory and
                writes in the background (the next save, :meth:`wait` or
                :meth:`close` waits for it).
        """
        start = time.perf_counter()
        try:
            if wait:
                # A plain save: the async path traces a tf.function on its second use
                # (~0.3 s), too slow for a notice that may leave a second or less.
                self.wait()
                path = self.manager.save(checkpoint_number=step)
                self.complete_step = step
            else:
                # TF's helper waits for the previous background write before it
                # copies (async_checkpoint_helper.py ``_write``: ``self._queue.join()``)
                # and raises its error, so returning means that one is complete.
                path = self.manager.save(checkpoint_number=step, options=self._async)
                self._settle()
                self._writing = step
        except Exception:
            self._remove_failed(step)
            raise
        self.last_save_seconds = time.perf_counter() - start
        return fileio.join(self.real_dir, path.rsplit("/", 1)[-1])

    def _settle(self) -> None:
        if self._writing is not None:
            self.complete_step, self._writing = self._writing, None

    def newly_complete(self) -> int | None:
        """The step of a background save that has finished writing since the last call.

        Reads the helper's queue of unfinished writes (``async_checkpoint_helper.py``:
        ``_async_save`` calls ``task_done`` after each write); a write that failed
        is not complete (its error is raised at the next save or :meth:`wait`).
        """
        if self._writing is None:
            return None
        helper = self.checkpoint._async_checkpointer()
        if helper._queue.unfinished_tasks or helper._async_error is not None:
            return None
        self._settle()
        return self.complete_step

    def wait(self) -> None:
        """Blocks until a background save has written its files; raises its error.

        ``Checkpoint.sync`` alone drops a failed background write's error (it only
        joins the queue); the helper's ``_check_async_thread_error`` raises it.
        """
        self.checkpoint.sync()
        helper = getattr(self.checkpoint, "_async_checkpointer_impl", None)
        try:
            if helper is not None:
                helper._check_async_thread_error()
        except Exception:
            self._remove_failed(None)
            raise
        self._settle()

    def _remove_failed(self, step: int | None) -> None:
        """After a failed save: removes its files and a failed background save's."""
        failed = {s for s in (step, self._writing) if s is not None}
        self._writing = None
        if not self.cluster.is_chief:
            return
        for s in failed:
            try:
                self._remove_partial(s)
            except Exception as e:  # noqa: BLE001 - the save's own error matters more
                log.warning("could not remove the files of the failed save %d: %s", s, e)

    def close(self) -> None:
        """Finishes a background save; removes a worker's temporary directory."""
        # Not wait(): an error here would replace the one the attempt is ending with.
        self.checkpoint.sync()
        if not self.cluster.is_chief and fileio.gfile().exists(self.write_dir):
            fileio.gfile().rmtree(self.write_dir)
