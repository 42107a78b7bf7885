"""Saving and restoring one ``tf.train.Checkpoint`` in the layout ``checkpointing`` names.

Periodic saves are asynchronous (TF's ``experimental_enable_async_checkpoint``):
the step loop only waits for the variables to be copied to host memory, and the
files are written in a background thread. That is what makes frequent time-based
saves cheap, and frequent saves are what bound the loss where a preemption
notice cannot be acted on in time (a KFP pod on GKE: see docs/preemption.md). Saves on a
preemption notice and at the last step wait until the files are complete. Only
saves whose files are complete count as saved (:attr:`CheckpointStore.complete_step`);
a failed save's files, and what cut saves of earlier attempts left, are removed.
"""

from __future__ import annotations

import logging
import re
import tempfile
import time

from spottrain import fileio
from spottrain.exits import ConfigError
from spottrain.fileio import quarantine
from spottrain.trainer.checkpointing import list_checkpoints
from spottrain.trainer.config import TrainConfig
from spottrain.trainer.distribution import Cluster
from spottrain.trainer.save_health import SKIPPED_SUFFIX

log = logging.getLogger(__name__)


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
        # When the save being written, and the call that started it, began (epoch s):
        # a failed save's state-file temp is any written since.
        self._writing_since = self._save_since = 0.0

    def restore_latest(self, skip: set[int] = frozenset(), limit: int | None = None) -> int:
        """Restores the newest readable checkpoint; returns its step (0: fresh start).

        An unreadable checkpoint (truncated by a kill, corrupted upload) is
        skipped with a warning and, by the chief, moved to ``quarantine/`` so
        that later attempts do not trip on it again.

        Args:
            skip: Steps not to resume from (diverged before a NaN stop).
            limit: Resume from this step's checkpoint exactly (``--resume-from-step``;
                0: afresh). The chief moves the skipped and newer checkpoints into
                ``quarantine/`` (:attr:`skipped`): a later attempt must not resume
                from them, and this run's new saves take their numbers.

        Raises:
            ConfigError: ``limit`` names a step without a checkpoint.
        """
        import tensorflow as tf

        found = list_checkpoints(self.real_dir)
        if limit is not None and limit and limit not in {s for s, _ in found}:
            steps = ", ".join(str(s) for s, _ in reversed(found)) or "none"
            raise ConfigError(
                f"--resume-from-step {limit}: no checkpoint of that step in "
                f"{self.real_dir!r} (steps: {steps}; 0 starts afresh)"
            )
        self.skipped: list[int] = []
        for step, prefix in found:
            if step in skip or (limit is not None and step > limit):
                self.skipped.append(step)
                log.warning(
                    "not resuming from %s (%s)",
                    prefix,
                    "diverged" if step in skip else f"newer than --resume-from-step {limit}",
                )
                self._quarantine(prefix, SKIPPED_SUFFIX)
                continue
            log.info("restoring %s (step %d)", prefix, step)  # a large model's takes long
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

    def _quarantine(self, prefix: str, suffix: str = "") -> None:
        if not self.cluster.is_chief:
            return
        try:
            for path in fileio.glob(f"{prefix}.*"):
                quarantine(self.real_dir, path, suffix)
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
        self._save_since = time.time()
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
                self._writing, self._writing_since = step, self._save_since
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
        since = min(self._save_since, self._writing_since or self._save_since)
        self._writing = None
        if not self.cluster.is_chief:
            return
        for s in failed:
            try:
                self._remove_partial(s)
            except Exception as e:  # noqa: BLE001 - the save's own error matters more
                log.warning("could not remove the files of the failed save %d: %s", s, e)
        try:
            # The manager writes the state file through ``checkpoint.tmp<id>`` after
            # the save's files; a full disk can cut that write and leave the temp.
            # (The lease keeps other runs out: a temp this recent is this save's.)
            for path in fileio.glob(fileio.join(self.real_dir, "checkpoint.tmp*")):
                if fileio.mtime(path) >= since - 2.0:  # coarse file-system clocks
                    fileio.remove(path)
                    log.info("removed %s, left by the failed save", path)
        except Exception as e:  # noqa: BLE001 - the save's own error matters more
            log.warning("could not remove the failed save's state-file temp: %s", e)

    def finish(self) -> None:
        """Lets a background save finish writing, without raising its error.

        Not :meth:`wait`: for an attempt that is ending, an error here would replace
        the one it is ending with.
        """
        self.checkpoint.sync()

    def close(self) -> None:
        """Finishes a background save; removes a worker's temporary directory."""
        self.finish()
        if not self.cluster.is_chief and fileio.gfile().exists(self.write_dir):
            fileio.gfile().rmtree(self.write_dir)
