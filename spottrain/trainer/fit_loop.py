"""The loop around a ``KerasTask``'s step as ``model.fit`` runs it: epochs, validation, callbacks.

The engine's loop (:mod:`spottrain.trainer.train_lib`) calls it between calls.

fit's loop (``keras/src/backend/tensorflow/trainer.py``, ``TensorFlowTrainer.fit``):
``on_train_begin``; per epoch ``on_epoch_begin``, per step ``on_train_batch_begin`` /
``on_train_batch_end(logs)``, then validation (``val_`` logs) and
``on_epoch_end(epoch, logs)``; ``model.stop_training`` ends it; ``on_train_end``.

Epoch *e* is the steps ``[e*spe, (e+1)*spe)`` (``spe``: steps per epoch) counted from
step 0 whatever the restarts; no call of several steps crosses an epoch's end
(:class:`spottrain.trainer.calls.Caller`'s ``epoch_steps``), so every worker ends an
epoch at the same step. fit resets its metrics at an epoch's start and logs their
running means; the engine resets them every step (a step's loss is its own), and
the epoch's logs are the means of its steps' values: with equal batches, fit's
means for loss and mean metrics (accuracy, MAE, ...). A batch's logs are the epoch's
running means so far, as fit's are.

What a resumed run needs to decide as an uninterrupted one (the epoch's running sums,
the epochs' logs, the callbacks' state, an early stop) is one JSON string in a
``tf.Variable`` of the engine's checkpoint, written before every save (:meth:`FitLoop.
saving`): a variable, not a ``PythonState``, so that TF's asynchronous save copies it
at the save like every other variable.
"""

from __future__ import annotations

import json
import logging
import math

from spottrain.exits import TrainerExit
from spottrain.trainer import fit_callbacks, fit_validation

log = logging.getLogger("trainer")


def make(task, model):
    """The loop around ``task``'s step (a task with a step of its own: :class:`NoLoop`)."""
    return FitLoop(task, model) if task.fit_step() else NoLoop()


class NoLoop:
    """A task's own step: no epochs, callbacks or validation of fit's; the engine's loop."""

    spe, stopped = 0, None

    def trackables(self) -> dict:  # noqa: D102 - see FitLoop
        return {}

    def configure(self, trainer) -> None:  # noqa: D102 - see FitLoop
        pass

    def begin(self, start_step: int, writer) -> None:  # noqa: D102 - see FitLoop
        pass

    def before_call(self, step: int) -> None:  # noqa: D102 - see FitLoop
        pass

    def after_call(self, call, step: int) -> bool:  # noqa: D102 - see FitLoop
        return False

    def step_logs(self, call) -> dict:  # noqa: D102 - see FitLoop
        return {}

    def saving(self) -> None:  # noqa: D102 - see FitLoop
        pass

    def end(self) -> None:  # noqa: D102 - see FitLoop
        pass

    def summary(self) -> dict:  # noqa: D102 - see FitLoop
        return {}

    def metrics(self) -> dict:  # noqa: D102 - see FitLoop
        return {}


class FitLoop:
    """Epochs, fit's logs, validation and callbacks around the engine's steps."""

    def __init__(self, task, model):
        import tensorflow as tf

        self.task, self.model = task, model
        # Checkpointed with the model (see the module's docstring).
        self.variable = tf.Variable("", dtype=tf.string, trainable=False, name="fit_loop")
        self.sums: list[float] = []  # this epoch's sums of [loss, *metrics] over its steps
        self.counted = 0  # steps in them
        self.history: dict[str, list[float]] = {}  # fit's History.history: per epoch
        self.stopped: dict | None = None  # {"step", "epoch"} when a callback stopped the run
        self.names: list[str] = []
        self.writer = None
        self.epoch_begun = -1

    def trackables(self) -> dict:
        """What the engine's ``tf.train.Checkpoint`` keeps of it."""
        return {"fit_loop": self.variable}

    def configure(self, trainer) -> None:
        """After the trainer's step functions exist: the plan, validation and callbacks."""
        cfg, cluster, strategy = trainer.cfg, trainer.cluster, trainer.strategy
        self.names = trainer.steps.metric_names  # filled when the step is traced
        # The input side's resolution of fit()'s arguments (spottrain/trainer/fit_plan.py).
        self.plan = plan = trainer.plan
        # A stream of unknown length run by --train-steps: the whole run is one epoch.
        self.spe = plan.steps_per_epoch or trainer.total_steps
        self.epochs = math.ceil(plan.epochs) if plan.steps_per_epoch else plan.initial_epoch + 1
        data = plan.validation_data
        self.validation = (
            fit_validation.Validation(
                self.model,
                strategy,
                data,
                plan.validation_batch_size or trainer.global_batch,
                plan.validation_steps,
            )  # fmt: skip
            if data is not None
            else None
        )
        if data is not None:
            fit_validation.should_run(0, self.plan.validation_freq)  # a bad one fails now
        self.callbacks = fit_callbacks.build(
            self.plan.callbacks, self.model,
            is_chief=cluster.is_chief, tensorboard_dir=cfg.tensorboard_dir,
            resumed=bool(self.variable.numpy()), params={"epochs": self.epochs,
                                                         "steps": self.spe},
        )  # fmt: skip

    # -- numbering -----------------------------------------------------------
    def epoch_of(self, step: int) -> int:
        """The (0-based, fit's) epoch that step ``step + 1`` belongs to."""
        return self.plan.initial_epoch + step // self.spe

    # -- the engine's hooks ---------------------------------------------------
    def begin(self, start_step: int, writer) -> None:
        """``on_train_begin``, then the checkpoint's state over what it reset."""
        self.writer = writer
        self.model.stop_training = False
        self._hook("on_train_begin")
        self.begun = fit_callbacks.state(self.callbacks)  # a save keeps what changes
        saved = self.variable.numpy().decode()
        if saved:
            data = json.loads(saved)
            self.sums, self.counted = data["sums"], data["counted"]
            self.history, self.stopped = data["history"], data["stopped"]
            fit_callbacks.restore(self.callbacks, data["callbacks"])
            # Begun already when the run stopped mid-epoch (fit does not begin it twice).
            if start_step % self.spe:
                self.epoch_begun = self.epoch_of(start_step)

    def before_call(self, step: int) -> None:
        """``on_epoch_begin`` at an epoch's first step; ``on_train_batch_begin``."""
        epoch = self.epoch_of(step)
        if epoch != self.epoch_begun:
            self.epoch_begun = epoch
            self.sums, self.counted = [], 0
            self._hook("on_epoch_begin", epoch)
        self._hook("on_train_batch_begin", step % self.spe)

    def step_logs(self, call) -> dict[str, float]:
        """The last step's logs besides the loss, by name (for the step line)."""
        return dict(zip(self.names, call.metrics, strict=False))

    def after_call(self, call, step: int) -> bool:
        """After a call that ended at ``step``: batch and epoch ends. True: stop the run."""
        if not self.sums:
            self.sums = [0.0] * len(call.sums)
        self.sums = [a + b for a, b in zip(self.sums, call.sums, strict=True)]
        self.counted += call.done
        running = self._means()
        self._hook("on_train_batch_end", (step - 1) % self.spe, running)
        ends_epoch = step % self.spe == 0 or step == self.plan.total_steps
        if ends_epoch:
            self._end_epoch(step, running)
        if self.model.stop_training:
            self.stopped = {"step": step, "epoch": self.epoch_of(step - 1)}
            epoch = self.stopped["epoch"] + 1
            print(f"stopped early by a callback at step {step}, epoch {epoch}", flush=True)
            return True
        return False

    def _means(self) -> dict[str, float]:
        n = max(self.counted, 1)
        return {k: v / n for k, v in zip(["loss", *self.names], self.sums, strict=False)}

    def _end_epoch(self, step: int, logs: dict) -> None:
        import tensorflow as tf

        epoch = self.epoch_of(step - 1)
        logs = dict(logs)
        if self.validation is not None and fit_validation.should_run(
            epoch, self.plan.validation_freq
        ):
            logs.update(self.validation.run())
        lr = _learning_rate(self.model)  # the epoch's, before a callback changes it
        self._hook("on_epoch_end", epoch, logs)
        for key, value in logs.items():
            self.history.setdefault(key, []).append(value)
        if lr is not None:
            self.history.setdefault("learning_rate", []).append(lr)
        text = " ".join(f"{k}={v:.4f}" for k, v in logs.items())
        lr_text = f" learning_rate={lr:.6g}" if lr is not None else ""
        print(f"epoch {epoch + 1}/{self.epochs} {text}{lr_text}", flush=True)
        if self.writer:
            with self.writer.as_default(step=step):
                for key, value in logs.items():
                    tag = key if key.startswith("val_") else f"epoch/{key}"
                    tf.summary.scalar(tag, value)
        self.sums, self.counted = [], 0

    def _hook(self, name: str, *args) -> None:
        """Calls ``name`` on every callback; what one raises is one line naming it (64)."""
        try:
            getattr(self.callbacks, name)(*args)
        except TrainerExit:
            raise
        except Exception as e:  # noqa: BLE001 - a user's callback: one line, not a traceback
            raise fit_callbacks.failure(self.callbacks, name, e) from e

    def saving(self) -> None:
        """Before every save: the state a resume needs, into the checkpointed variable."""
        data = {
            "sums": self.sums,
            "counted": self.counted,
            "history": self.history,
            "stopped": self.stopped,
            "callbacks": fit_callbacks.state(self.callbacks, self.begun),
        }
        self.variable.assign(json.dumps(data))

    def end(self) -> None:
        """``on_train_end`` with the last epoch's logs (EarlyStopping's best weights)."""
        last = {k: v[-1] for k, v in self.history.items() if v}
        self._hook("on_train_end", last)

    def summary(self) -> dict:
        """For training_summary.json: the epochs' logs (fit's History) and an early stop."""
        out = {"epochs": self.epochs, "steps_per_epoch": self.spe, "history": self.history}
        if self.stopped:
            out.update(stopped_early=True, stopped_epoch=self.stopped["epoch"] + 1)
        return out

    def metrics(self) -> dict[str, float]:
        """The last validation's logs (the run's KFP metrics when the task has none)."""
        return {k: v[-1] for k, v in self.history.items() if k.startswith("val_") and v}


def check(task, model, strategy, cfg) -> str:
    """``--check``: fit's callbacks and validation as a run would take them, one phrase."""
    if not task.fit_step():
        return ""
    from spottrain.trainer import fit_plan

    plan = fit_plan.resolve(task, cfg, strategy.num_replicas_in_sync, need_length=False)
    callbacks = fit_callbacks.build(
        plan.callbacks, model, is_chief=True, tensorboard_dir=cfg.tensorboard_dir,
        resumed=False, params={},
    )  # fmt: skip
    names = [type(cb).__name__ for cb in callbacks.callbacks if type(cb).__name__ != "History"]
    said = f"; callbacks {', '.join(names)}" if names else ""
    if plan.validation_data is not None:  # given, or validation_split's held-out part
        fit_validation.should_run(0, plan.validation_freq)
        size = plan.validation_batch_size or plan.global_batch
        validation = fit_validation.Validation(
            model, strategy, plan.validation_data, size, plan.validation_steps
        )
        logs = validation.run()
        said += "; validation " + " ".join(f"{k}={v:.4g}" for k, v in logs.items())
    return said


def _learning_rate(model) -> float | None:
    optimizer = getattr(model, "optimizer", None)
    try:
        return float(optimizer.learning_rate.numpy())
    except Exception:  # noqa: BLE001 - a schedule, or no optimizer: not shown
        return None
