"""The engine: wires a task, distribution, checkpointing and preemption together.

What is trained comes from a :class:`spottrain.trainer.task_api.Task` (model, input pipeline,
loss, validation metrics); everything else is here.

The loop is a custom ``strategy.run`` loop rather than ``model.fit``: Keras 3's
fit fails under MultiWorkerMirroredStrategy and its BackupAndRestore has no
multi-worker logic (see docs/preemption.md). Every step all-reduces a small vector
``[loss, stop, save]`` so that every worker agrees, at the same step, on
NaN-ness, on stopping for a preemption and on time-based saves.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time

from spottrain import diagnostics, exits, fileio
from spottrain import ledger as ledger_lib
from spottrain.exits import ConfigError, TrainerExit
from spottrain.trainer import (
    calls,
    checkpoint_store,
    checkpointing,
    config,
    distribution,
    export,
    fit_evaluate,
    fit_loop,
    fit_step,
    loss_scale,
    metadata_notice,
    nan_inputs,
    notice_phase,
    preemption,
    run_length,
    save_health,
    steps,
    task_calls,
)
from spottrain.trainer.heartbeat import Heartbeat
from spottrain.trainer.task_api import Task, TrainInput
from spottrain.trainer.task_loader import call_task

# The chief writes it into --model-dir at the end; the components and make run read it.
SUMMARY_FILE = "training_summary.json"
log = logging.getLogger("trainer")


class _DropMessage(logging.Filter):
    """Drops the records whose message contains ``text``."""

    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def _expected_replicas(cluster: distribution.Cluster) -> int:
    import tensorflow as tf

    # Listing devices does not initialise the runtime, so MWMS can still be created.
    return cluster.num_workers * max(1, len(tf.config.list_physical_devices("GPU")))


class Trainer:
    """One attempt of a training run on this worker."""

    def __init__(
        self,
        cfg: config.TrainConfig,
        cluster: distribution.Cluster,
        task: Task,
        ledger: ledger_lib.Ledger,
        stop: preemption.StopFlag | None = None,
        lease=None,
    ):
        self.ledger = ledger
        # The chief's writer lease on the checkpoint dir (None elsewhere): lost, it stops.
        self.lease = lease
        self.cfg = cfg
        self.cluster = cluster
        self.task = task
        self.stop = stop or preemption.StopFlag()
        self.started = time.monotonic()
        # Progress reports to the hang-watchdog supervisor (spottrain.trainer.watchdog).
        self.heartbeat = Heartbeat()
        # Where the attempt is decides what a notice does (notice_phase).
        self.phases = notice_phase.Phases(self._end_at_once, self.heartbeat.doing)
        self.stop.on_set = self._noted
        if self.stop.is_set():  # heard while TensorFlow and the task started
            self.phases.heard = self.stop.signal_name
        # (seconds waiting for input, seconds for the whole step) of recent steps; the
        # input wait is measured only with an on_step hook (else the step fetches it).
        self.step_times: collections.deque = collections.deque(maxlen=10_000)
        # Seconds and steps of the calls after the first: the ledger's seconds_per_step.
        self.steady = [0.0, 0]
        self.started_runtime = False  # start() ran: TensorFlow configured, strategy made

    # -- set-up -------------------------------------------------------------
    def start(self) -> None:
        """Opens the attempt's record, configures TensorFlow and creates the strategy.

        Before the task's module is imported (:mod:`spottrain.trainer.process_setup`):
        its module-level TensorFlow objects then start a context already configured.
        """
        from spottrain.trainer import process_setup

        cfg = self.cfg
        self.heartbeat.dump_path(
            checkpointing.diagnostics_path(cfg, self.cluster, diagnostics.HANG)
        )
        # Open the ledger record before anything that can hang (MWMS start-up), so
        # a hung attempt leaves a record the next attempt can close as a hang.
        found = checkpointing.list_checkpoints(cfg.checkpoint_dir)
        self.resumes_from = found[0][0] if found else 0  # until restored (start_step)
        self.ledger.begin(self.resumes_from)
        self.phases.opened()  # a notice heard before now ends the attempt here
        process_setup.configure(cfg)
        replicas = _expected_replicas(self.cluster)
        self.global_batch = config.global_batch(cfg, replicas)  # fails before MWMS starts
        self.phases.starting(
            "while the gang formed" if self.cluster.multi_worker else "while TensorFlow started"
        )
        self.strategy = distribution.create_strategy(self.cluster, cfg.collective_timeout)
        # After the strategy, whose own SIGTERM handler this replaces: the trainer
        # process blocked the notice until now (spottrain.trainer.task).
        self.stop.install()
        self.phases.starting("while the task was loaded")
        # GCE's metadata notice can come before the SIGTERM (it says whether it watches).
        metadata_notice.watch(self.stop.set)
        process_setup.seed(cfg)  # before the task's module draws at import
        self.started_runtime = True

    def build(self) -> None:
        """Creates the data pipelines, model and optimizer and restores state (after start)."""
        import keras
        import tensorflow as tf

        if not self.started_runtime:
            self.start()
        cfg = self.cfg
        self.phases.starting("while the model was built")
        self.replicas = self.strategy.num_replicas_in_sync
        # A KerasTask's fit() (its batch, epochs, steps_per_epoch), else the flags.
        self.global_batch, self.total_steps, self.plan = run_length.of(
            self.task, cfg, self.replicas
        )
        if cfg.mixed_precision:
            keras.mixed_precision.set_global_policy("mixed_float16")
        # Same initial weights and dropout masks on every run with this seed; the
        # dropout RNG state is a model variable, so it is checkpointed too.
        keras.utils.set_random_seed(cfg.seed)
        from spottrain.trainer import optimizer as optimizer_lib  # Keras: imported only to train

        with self.strategy.scope():
            self.model = task_calls.build_model(self.task)
        # Outside the scope: a task's input pipeline (a TextVectorization it adapts)
        # must not create distributed variables.
        spec = self._element_spec() if self.task.fit_step() else None
        with self.strategy.scope():
            if self.task.fit_step():
                self.optimizer, self.optimizers = fit_step.prepare(self.model, spec, cfg)
            else:
                self.optimizer, self.optimizers = task_calls.build_optimizers(
                    self.task, self.model, cfg
                )
            # Loss scaling: every replica skips an overflowing step together (issue 54).
            loss_scale.agree_across_replicas(self.optimizers.values())
            self.step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.fit_loop = fit_loop.make(self.task, self.model)  # a KerasTask's epochs, callbacks
        # The step's optimizer where checkpoints have always kept it (the engine's, or a
        # compiled one), and any others by name (a task's own, a GAN model's two).
        others = {k: v for k, v in self.optimizers.items() if v is not self.optimizer}
        trackables = {"optimizer": self.optimizer} if self.optimizer is not None else {}
        trackables.update({"optimizers": others} if others else {})
        trackables.update(self.fit_loop.trackables())
        ckpt = tf.train.Checkpoint(
            model=self.model,
            step=self.step_var,
            **trackables,
            # Keras 3 RNG states (dropout's SeedGenerator) are not trackable
            # attributes of the model; without them a resumed run draws other
            # dropout masks and stops being identical to an uninterrupted one.
            non_trainable=[v.value for v in self.model.non_trainable_variables],
        )
        self.store = checkpoint_store.CheckpointStore(cfg, self.cluster, ckpt)
        # Every worker reads the same history and so picks the same checkpoint.
        self.history = save_health.SaveHistory(cfg.checkpoint_dir, self.cluster.is_chief)
        limit = save_health.resume_limit(self.history.data, cfg.resume_from_step, cfg.fingerprint())
        skip = set() if limit is not None else save_health.diverged_steps(self.history.data)
        self.phases.starting("while a checkpoint was restored")
        self.start_step = self.store.restore_latest(skip=skip, limit=limit)
        self.phases.starting("before the first step ended (its trace or compile)")
        rewound = None if limit is None else {"fingerprint": cfg.fingerprint(), "to_step": limit}
        self.history.resumed(self.start_step, self.store.skipped, rewound)
        self.ledger.set_start(self.start_step)  # lower if a corrupt checkpoint was skipped
        # The flags' learning rate is the engine optimizer's, not a compiled one's.
        flags_optimizer = not self.task.fit_step() or bool(cfg.optimizer)
        restored = self.start_step > 0 and self.optimizer is not None and flags_optimizer
        if restored and optimizer_lib.apply_learning_rate(self.optimizer, cfg):
            log.info("learning rate %g from the flags, over the checkpoint's", cfg.learning_rate)
        if cfg.save_every_seconds or cfg.save_every_steps < self.total_steps:
            self.store.warm_up()  # periodic saves will use the asynchronous path
        if self.start_step > self.total_steps:
            raise ConfigError(
                f"--train-steps {self.total_steps} is below the checkpointed step "
                f"{self.start_step} in {cfg.checkpoint_dir!r}"
            )
        self.blame = task_calls.Blame()
        self.steps = steps.make_step_functions(
            steps.StepParts(
                cfg, self.task, self.model, self.optimizer, self.optimizers, self.strategy,
                self.global_batch, self.replicas, self.blame,
            )
        )  # fmt: skip
        self.xla = self.steps.xla
        self.fit_loop.configure(self)  # its plan, validation and callbacks
        self.writer = (
            tf.summary.create_file_writer(cfg.tensorboard_dir)
            if self.cluster.is_chief and cfg.tensorboard_dir
            else None
        )

    def _element_spec(self):
        """One element's spec of this worker's pipeline (a fit step's model is built on it)."""
        import tensorflow as tf

        context = tf.distribute.InputContext(
            num_input_pipelines=self.cluster.num_workers,
            input_pipeline_id=0,  # every worker's elements have the same spec
            num_replicas_in_sync=self.replicas,
        )
        spec = TrainInput(context, self.global_batch, self.cfg.seed, 0, max(self.total_steps, 1))
        return task_calls.dataset(self.task, spec).element_spec

    def _probe_resume(self, context) -> None:
        """--deterministic: refuses a pipeline whose batches a resume would not reproduce."""
        from spottrain.trainer import resume_probe

        args = (self.task, context, self.global_batch, self.cfg.seed, self.total_steps)
        problem = call_task(task_calls.named(self.task, "train_dataset"), resume_probe.probe, *args)
        if problem:
            raise ConfigError(f"--deterministic: {problem}")
        log.info("--deterministic: a resumed pipeline reproduces its batches (probed)")

    # -- the loop -----------------------------------------------------------
    def _save(self, step: int, loss: float, why: str, *, wait: bool, notice: bool = False) -> None:
        """Saves at ``step``; with ``notice``, the ledger records the notice meanwhile."""
        if wait:
            self.heartbeat.saving()
        self.step_var.assign(step)
        self.fit_loop.saving()
        self.history.saved(step, loss, self.cfg.keep_checkpoints)
        # At once, not within the ledger's interval: a kill during the save would
        # otherwise leave a record seconds of steps behind the step being saved.
        self.ledger.progress(step, saved_step=self.store.newly_complete(), force=True)
        noting = None
        if notice:
            # Beside the save, not before it: if the platform kills us before the
            # files are complete, the next attempt finds the notice and records the
            # attempt as preempted_unsaved rather than as an unexplained kill.
            noting = threading.Thread(
                target=self.ledger.notice,
                args=(step, self.stop.signal_name or "peer"),
                daemon=True,
            )
            noting.start()
        path = self.store.save(step, wait=wait)
        if noting is not None:
            noting.join()
        # A save starts only once the previous background save has written its files.
        self.ledger.progress(step, saved_step=step if wait else self.store.complete_step)
        log.info(
            "saved %s at step %d (%s, %.0f ms%s)",
            path,
            step,
            why,
            1000 * self.store.last_save_seconds,
            "" if wait else ", writing in the background",
        )

    def _noted(self, reason: str) -> None:
        """A notice arrived (the notice thread): acts on it by phase, records it at once.

        Starting, the attempt ends here (``_end_at_once``). Training, the save at the
        next step boundary records it again; this record counts when the platform
        kills the attempt before that step ends (a KFP pod's short grace).
        """
        phase = self.phases.notice(reason)
        if phase != notice_phase.STARTING:
            self.heartbeat.heard()  # the supervisor leaves it to this process
        notice_phase.say(phase, reason, getattr(self, "total_steps", 0))
        step = getattr(self, "step_now", getattr(self, "start_step", 0))
        threading.Thread(target=self.ledger.notice, args=(step, reason), daemon=True).start()

    def _end_at_once(self, reason: str, doing: str) -> None:
        """Ends an attempt that trained nothing yet (from the notice's thread): 143."""
        step = getattr(self, "start_step", getattr(self, "resumes_from", 0))
        notice_phase.end_attempt(self.ledger, self.lease, reason, doing, step)

    def settle_saves(self) -> None:
        """Before an ending attempt's record is closed: lets a background save finish.

        Its files are what the next attempt resumes from (a peer's death does not
        stop the chief's write), so the record names it. Never raises: the attempt's
        own ending matters more.
        """
        store = getattr(self, "store", None)
        if store is None:
            return
        try:
            store.finish()
            done = store.newly_complete()
            if done is not None:
                self.ledger.progress(done, saved_step=done)
        except Exception as e:  # noqa: BLE001
            log.warning("could not wait for the background save: %s", e)

    def train(self, on_step=None) -> int:
        """Runs steps ``start_step .. total_steps``; returns the final step.

        Args:
            on_step: optional ``callback(step, input_seconds, step_seconds)`` after
                each step (the profiler uses it to open and close its window).
        """
        cfg = self.cfg
        per_call = calls.per_call(cfg, profiled=on_step is not None) or "auto"
        print(
            f"start_step={self.start_step} total_steps={self.total_steps} "
            f"global_batch={self.global_batch} replicas={self.replicas} "
            f"steps_per_loop={per_call} xla={'on' if self.xla else 'off'}",
            flush=True,
        )
        self.heartbeat.start(self.start_step)
        fit = self.fit_loop
        fit.begin(self.start_step, self.writer)
        if self.start_step == self.total_steps or fit.stopped:
            log.info("checkpoint already at the final step %d", self.start_step)
            fit.end()
            self.heartbeat.done()
            self.phases.enter(notice_phase.FINISHING)
            return self.start_step

        contexts = self._contexts = []  # the NaN guard reads a batch again through them

        def dataset_fn(context):
            contexts.append(context)
            ds = task_calls.dataset(
                self.task,
                TrainInput(context, self.global_batch, cfg.seed, self.start_step, self.total_steps),
            )
            self._check_batch_memory(ds, context)
            return ds

        iterator = iter(self.strategy.distribute_datasets_from_function(dataset_fn))
        if cfg.deterministic and contexts:
            self._probe_resume(contexts[0])
        caller = calls.Caller(
            self.steps, iterator, on_step,
            cfg=cfg, total_steps=self.total_steps, stop=self.stop,
            multi_worker=self.cluster.multi_worker, agree=self._agreed_mean,
            blame=self.blame, step_error=self.step_error, epoch_steps=fit.spe,
        )  # fmt: skip
        loop = calls.LoopState(step=self.start_step, last_log_step=self.start_step)
        self.first_step_seconds = None
        while loop.step < self.total_steps:
            self._check_lease(loop.step)
            fit.before_call(loop.step)
            call = caller.run(loop)
            if self.phases.phase == notice_phase.STARTING:
                self.phases.enter(notice_phase.TRAINING)  # a step is done: a notice saves
            # After-step actions, in order: each may end the attempt.
            self._record(call, loop, on_step)
            self._guard_nan(loop.step, call.loss, call.bad_grads)
            self._log(call, loop)
            if fit.after_call(call, loop.step):  # a callback stopped the run
                self._save(loop.step, call.loss, "stopped early", wait=True)
                break
            self._act_on_votes(call, loop, caller.ahead)
        fit.end()
        self.heartbeat.done()  # evaluation and export are bounded and not steps
        self.phases.enter(notice_phase.FINISHING)  # the final save is complete
        return loop.step

    def _check_lease(self, step: int) -> None:
        if self.lease is not None and self.lease.lost.is_set():
            raise exits.NotTheWriter(
                exits.UNAVAILABLE,
                f"lost the lease on --checkpoint-dir {self.cfg.checkpoint_dir!r} (another "
                f"writer took it over): stopped at step {step} without writing more",
            )

    def _record(self, call: calls.Call, loop: calls.LoopState, on_step) -> None:
        """The steps of a call are done: history, heartbeat, timings, ledger."""
        loop.logged = loop.step // self.cfg.log_every_steps
        self.history.step_loss(loop.step + 1, call.first)
        loop.step += call.done
        self.step_now = step = loop.step
        self.heartbeat.beat(step)
        self.step_times.append((call.input_s, call.seconds / call.done))  # per step of the call
        if on_step is not None:
            on_step(step, call.input_s, call.seconds)
        if self.first_step_seconds is not None:  # the first call traces: not the speed
            self.steady[0] += call.seconds
            self.steady[1] += call.done
        per_step = self.steady[0] / self.steady[1] if self.steady[1] else None
        self.ledger.progress(
            step, saved_step=self.store.newly_complete(), seconds_per_step=per_step
        )
        if self.first_step_seconds is None:
            self.first_step_seconds = time.monotonic() - self.started
            self.ledger.first_step()
            log.info("first step done %.1f s after start", self.first_step_seconds)

    def _guard_nan(self, step: int, loss: float, bad_grads: int) -> None:
        """A loss or gradients that are not finite end the attempt (65), with no save."""
        if math.isfinite(loss) and not bad_grads:
            return
        # The newest checkpoint stays the last good one. A background save of an
        # earlier step may still be writing: let it finish so the ledger names it.
        self.store.finish()
        self.ledger.progress(step, saved_step=self.store.newly_complete())
        present = [s for s, _ in checkpointing.list_checkpoints(self.cfg.checkpoint_dir)]
        healthy, diverged = self.history.diverged(step, present)
        raise TrainerExit(
            exits.FATAL_NAN,
            f"{nan_inputs.what(loss, bad_grads)} at step {step}; {nan_inputs.remedy(self, step)}; "
            + save_health.nan_resume_line(healthy, diverged),
        )

    def _log(self, call: calls.Call, loop: calls.LoopState) -> None:
        """The step line and TensorBoard scalars, every --log-every-steps."""
        import tensorflow as tf

        step = loop.step
        if step // self.cfg.log_every_steps <= loop.logged and step != self.total_steps:
            return
        now = time.monotonic()
        rate = (step - loop.last_log_step) / max(now - loop.last_log, 1e-9)
        loop.last_log, loop.last_log_step = now, step
        logs = self.fit_loop.step_logs(call)  # fit's logs besides the loss: accuracy, ...
        shown = "".join(f" {k}={v:.4f}" for k, v in logs.items())
        line = f"step {step}/{self.total_steps} loss={call.loss:.4f}{shown} {rate:.1f} steps/s"
        print(line, flush=True)
        if self.writer:
            with self.writer.as_default(step=step):
                tf.summary.scalar("loss", call.loss)
                for key, value in logs.items():
                    tf.summary.scalar(key, value)
                tf.summary.scalar("steps_per_second", rate)

    def _act_on_votes(self, call: calls.Call, loop: calls.LoopState, ahead: bool) -> None:
        """Saves on the votes (notice, timer) and by count; a notice ends the attempt."""
        cfg, step = self.cfg, loop.step
        stop_votes, save_votes = call.stop_votes, call.save_votes
        if loop.held is not None:
            stop_votes, save_votes = max(stop_votes, loop.held[0]), max(save_votes, loop.held[1])
            loop.held = None
        # One process need not wait for the next step's vote: the notice period
        # is short, and on some platforms much shorter than the ~30 s (docs/preemption.md).
        stopping = stop_votes > 0 or (not self.cluster.multi_worker and self.stop.is_set())
        if (stopping or save_votes > 0) and ahead:
            loop.held = (1.0 if stopping else 0.0, save_votes)  # acted on after that step
            return
        if stopping:
            self._save_on_notice(step, call.loss)
        if step % cfg.save_every_steps == 0 or save_votes > 0 or step == self.total_steps:
            why = "timer" if save_votes > 0 else "interval"
            self._save(step, call.loss, why, wait=step == self.total_steps)
            loop.last_save = time.monotonic()

    def _save_on_notice(self, step: int, loss: float) -> None:
        """Saves at ``step`` on every worker, then ends the attempt (143)."""
        self._save(step, loss, "preemption", wait=True, notice=True)
        # Only the chief writes the checkpoint and knows it is complete (the
        # others' copies are private by-products of the collective save); it
        # reaches this barrier only once its files are, so the others claim
        # the save only when all got through it.
        failed = self._barrier()
        if failed is not None and not self.cluster.is_chief:
            raise TrainerExit(
                exits.PEER_LOST,
                f"preempted at step {step} of {self.total_steps}: the chief did not "
                f"confirm its save ({failed}); the next attempt resumes from the "
                "last complete checkpoint",
            )
        raise TrainerExit(
            exits.PREEMPTED,
            f"preempted: saved at step {step} of {self.total_steps}, 0 steps lost"
            if self.cluster.is_chief
            else f"preempted at step {step} of {self.total_steps}: the chief's save "
            "is complete, 0 steps lost",
        )

    def _ran_out(self, step: int, n: int) -> ConfigError:
        """The line for a dataset that ended before the run's last step."""
        what = task_calls.named(self.task, "train_dataset")
        if step == self.start_step and self.task.fit_step():
            return task_calls.no_batch(self.task, step + 1, self.global_batch)
        if self.task.fit_step():
            return ConfigError(
                f"{what} ran out before step {step + n} of {self.total_steps}: it holds "
                "fewer batches than the run needs; give FitArgs(steps_per_epoch=...) (the "
                "batches one epoch of it holds) or fewer --train-steps"
            )
        return ConfigError(
            f"{what} ended before step {step + n} of {self.total_steps}: it must yield a "
            "batch for every step from TrainInput.start_step to total_steps (repeat it)"
        )

    def step_error(self, error: Exception, step: int, n: int) -> Exception | None:
        """What a failed call raises instead: one line for the known failures."""
        import tensorflow as tf

        if isinstance(error, StopIteration | tf.errors.OutOfRangeError):
            return self._ran_out(step, n)
        if isinstance(error, tf.errors.ResourceExhaustedError):
            return ConfigError(
                f"out of memory at step {step + 1} with per-replica batch "
                f"{self.global_batch // self.replicas}; lower --batch-size-per-replica "
                "(or the task's input size, e.g. --image-size)"
            )
        # The step is traced on its first call: what the task's own code raises
        # then, or any OpError later, is one line naming the task's part.
        return task_calls.step_failure(
            error, step + 1, self.task, self.blame, self.global_batch,
            self.cluster.multi_worker, self.xla and self.cfg.jit_compile,
        )  # fmt: skip

    def _check_batch_memory(self, ds, context) -> None:
        """A batch that cannot fit is one fatal line now, not the OOM killer's 137 later."""
        from spottrain.trainer import batch_memory

        spec = getattr(ds, "element_spec", None)
        if spec is None:  # not a tf.data.Dataset: the first step names that
            return
        cfg = self.cfg
        flag = (
            f"--global-batch-size {cfg.global_batch_size}"
            if cfg.global_batch_size
            else f"--batch-size-per-replica {cfg.batch_size_per_replica}"
        )
        per_replica = context.get_per_replica_batch_size(self.global_batch)
        local = max(1, context.num_replicas_in_sync // context.num_input_pipelines)
        batch_memory.check_batch_fits(spec, per_replica, local, flag, self.model)

    # -- the end --------------------------------------------------------------
    def evaluate(self) -> dict:
        """The last validation logs of fit's and the task's ``evaluate()`` (failing: one line)."""
        return fit_evaluate.metrics(self.task, self.model, self.global_batch, self.fit_loop)

    def export(self, final_step: int, metrics: dict) -> dict:
        """Saves the model and a JSON summary to the model dir (chief; workers to temp)."""
        import tempfile

        import tensorflow as tf

        model_dir = (
            self.cfg.model_dir.rstrip("/")
            if self.cluster.is_chief
            else tempfile.mkdtemp(prefix=f"spottrain-model-{self.cluster.name}-")
        )
        tf.io.gfile.makedirs(model_dir)
        # Every worker saves (reads of synced variables can be collectives); only
        # the chief's copy is kept.
        written = export.write(self.model, model_dir)
        if self.cluster.is_chief:
            log.info("model: %s", export.line(written))
        summary = {
            "final_step": final_step,
            "train_steps": self.total_steps,
            "start_step": self.start_step,
            "global_batch_size": self.global_batch,
            "num_workers": self.cluster.num_workers,
            "replicas": self.replicas,
            **self.task.summary(),
            **self.fit_loop.summary(),
            "seconds": round(time.monotonic() - self.started, 2),
            "exported": written["written"],
            **({"not_exported": written["not_written"]} if written["not_written"] else {}),
            **metrics,
        }
        if self.cluster.is_chief:
            with fileio.naming(model_dir):
                self.task.export(self.model, model_dir)
            fileio.write_json(f"{model_dir}/{SUMMARY_FILE}", summary)
            if self.writer:
                with self.writer.as_default(step=final_step):
                    for key in ("val_loss", "val_accuracy"):
                        if key in metrics:
                            tf.summary.scalar(key, metrics[key])
                self.writer.flush()
        else:
            tf.io.gfile.rmtree(model_dir)
        return summary

    def finish(self) -> None:
        """Waits until every worker got here (its save, evaluation and export done).

        After it no peer needs this process (a collective or the coordination
        service it may host), so the process may exit at once (``exit_process``).
        A peer that failed meanwhile is its own exit code's business, not ours.
        """
        failed = self._barrier()
        if failed is not None:  # this worker's work is done and saved
            log.warning("a peer did not reach the end (%s); exiting anyway", failed)

    def _barrier(self) -> str | None:
        """Waits for every worker here; returns why it failed (a peer gone), else None."""
        if not self.cluster.multi_worker:
            return None
        try:
            self._eager_sum(1.0)
        except Exception as e:  # noqa: BLE001 - a collective fails in many types
            return type(e).__name__
        return None

    def _agreed_mean(self, value: float) -> float:
        """The mean of ``value`` over the replicas: the same number on every worker."""
        if not self.cluster.multi_worker:
            return value
        return self._eager_sum(value) / self.replicas

    def _eager_sum(self, value: float) -> float:
        """Sums ``value`` over every replica in one eager collective."""
        import tensorflow as tf

        # One eager collective: TensorFlow's warning that strategy.run "eagerly has
        # significant overhead" is about calling it every step, not once; it ended every
        # run's log. Not a tf.function: that would trace a graph for this one call.
        quiet = _DropMessage("eagerly has significant overhead")
        tf.get_logger().addFilter(quiet)
        try:
            each = self.strategy.run(lambda: tf.constant(value, tf.float32))
            return float(self.strategy.reduce(tf.distribute.ReduceOp.SUM, each, axis=None))
        finally:
            tf.get_logger().removeFilter(quiet)

    def close(self) -> None:
        """Flushes logs and removes temp dirs."""
        if getattr(self, "writer", None):
            self.writer.flush()
        if getattr(self, "store", None):
            self.store.close()
