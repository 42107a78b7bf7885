"""The Task API: what is trained is the task's; the loop, saves and accounting are the engine's.

A task says how to build the model, the per-worker input pipeline and the loss
(optionally: the optimizer, validation metrics and extra export files). The engine
(:mod:`spottrain.trainer.train_lib`) owns everything else: the MultiWorkerMirroredStrategy,
the step loop, every save (periodic, time-based asynchronous, on a notice at the
same step on every worker), exact resume, the NaN guard, the hang watchdog, the
attempt ledger, TensorBoard scalars, profiler step markers and the outputs.

Select a task with ``python -m spottrain.trainer.task --task my_pkg.my_module:MyTask
--task-args '{"hidden": 64}'``; the built-in image classifier
(:class:`spottrain.tasks.image.task.ImageClassificationTask`) is the default.

**Exact resume.** The engine resumes at the checkpointed step and asks the task for
the batches from that step on (``TrainInput.start_step``). Under
MultiWorkerMirroredStrategy the engine cannot checkpoint the input iterator for the
task: TensorFlow 2.21's distributed iterator is not trackable
(``tensorflow/python/distribute/input_lib.py`` ``class DistributedIterator`` is a
``CompositeTensor``, not a ``Trackable``; ``tf.train.Checkpoint(iterator=...)``
raises ``ValueError``). So the contract is: the batch of step *s* is a function of
``(seed, s)``. A pipeline built from ``tf.data.Dataset.range`` (or from a fixed
list of files) with stateless or seeded operations, ``deterministic=True`` and
``skip`` to ``start_step`` meets it, and then an interrupted run ends with weights
bit-identical to an uninterrupted one; the final step count is exact either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spottrain.exits import ConfigError
from spottrain.trainer.fit_args import FitArgs

__all__ = ["ConfigError", "FitArgs", "KerasTask", "Task", "TrainInput"]


@dataclass(frozen=True)
class TrainInput:
    """What the engine tells a task's input pipeline.

    Attributes:
        context: This worker's ``tf.distribute.InputContext`` (pipeline id, number
            of pipelines, replicas).
        global_batch: Examples per step across all replicas.
        seed: The run's seed (``--seed``).
        start_step: The first step to produce (0, or the checkpointed step).
        total_steps: The run's final step.
    """

    context: Any
    global_batch: int
    seed: int
    start_step: int
    total_steps: int

    @property
    def per_replica_batch(self) -> int:
        """The batch each element of the returned dataset must have."""
        return self.context.get_per_replica_batch_size(self.global_batch)

    @property
    def worker_slice(self) -> slice:
        """This worker's part of a global batch ``[start, stop)`` (its replicas' examples)."""
        per_worker = self.global_batch // self.context.num_input_pipelines
        start = self.context.input_pipeline_id * per_worker
        return slice(start, start + per_worker)


class Task:
    """Subclass and implement :meth:`build_model`, :meth:`train_dataset` and :meth:`loss`.

    Args:
        args: The task's own settings (``--task-args``, a JSON object).
        cfg: The engine's settings (``spottrain.trainer.config.TrainConfig``), read-only.
    """

    def __init__(self, args: dict[str, Any], cfg):
        self.args = dict(args)
        self.cfg = cfg

    # -- before the strategy exists (fast: a bad task fails in seconds) ---------
    def prepare(self) -> None:
        """Checks the task's settings and data; raise ``ConfigError`` naming a bad value."""

    def num_train_examples(self) -> int | None:
        """Examples per epoch, if known (needed only for ``--epochs``)."""
        return None

    # -- inside the strategy's scope --------------------------------------------
    def build_model(self):
        """The ``keras.Model`` to train (built on every worker, same seed)."""
        raise NotImplementedError

    def train_dataset(self, spec: TrainInput):
        """This worker's ``tf.data.Dataset`` of ``(features, labels)``.

        Each element is one replica's batch of ``spec.per_replica_batch``; the
        worker's replicas take consecutive elements. Start at ``spec.start_step``.
        """
        raise NotImplementedError

    def loss(self, labels, outputs):
        """Per-example losses, a float32 tensor of shape ``[batch]``."""
        raise NotImplementedError

    # -- optional: a whole step of your own (several losses or optimizers) ---------
    def build_optimizers(self, model) -> dict[str, Any] | None:
        """A dict of the Keras optimizers a custom :meth:`train_step` uses, by name.

        E.g. ``{"encoder": sgd, "head": adam}``; ``None`` (the default): the
        engine's optimizer, as ``{"optimizer": …}``.

        Called in the strategy's scope after :meth:`build_model`. Build each on the
        variables it updates (``opt.build(variables)``): their slots are then part of
        every checkpoint and restored with it.
        """
        return None

    def train_step(self, model, optimizers: dict[str, Any], features, labels, global_batch: int):
        """One replica's whole step: compute the losses, apply the gradients, return the loss.

        Override only for what the default step (``loss`` + the engine's optimizer,
        clipping and loss scaling) cannot do. Runs inside ``strategy.run``: average
        per-example losses over the *global* batch (``tf.nn.compute_average_loss(...,
        global_batch_size=global_batch)``) and call ``apply_gradients`` as usual
        (the optimizer sums the replicas' gradients). Return this replica's loss as
        a float32 scalar; the engine sums it over replicas for its log, its NaN guard
        and its stop/save vote.
        """
        raise NotImplementedError

    @classmethod
    def has_own_step(cls) -> bool:
        """Whether this task overrides :meth:`train_step`."""
        return cls.train_step is not Task.train_step

    @classmethod
    def fit_step(cls) -> bool:
        """Whether each step is the model's own ``train_step``, as fit runs it (KerasTask)."""
        return False

    # -- optional -----------------------------------------------------------------
    @classmethod
    def flags(cls):
        """Trainer flags of the task's own, read of the default task only; ``None``: none.

        A module (or object) importable without TensorFlow, with ``add(parser)``,
        ``merge(values)`` and ``check(args, data)``: the image's built-in task gives
        ``--backbone``, ``--image-size``... this way. Only the default task's are read:
        the trainer parses its flags before it knows ``--task``; another task takes
        ``--task-args``.
        """
        return None

    def evaluate(self, model, batch_size: int) -> dict[str, Any]:
        """Validation metrics after training (each worker, whole split); ``{}``: none.

        Numbers become the run's KFP ``Metrics``. A classifier may add
        ``"confusion_matrix"`` (a list of rows: true label, then predicted, counts) with
        ``"class_names"`` in :meth:`summary`: the components log it as
        ``ClassificationMetrics``, which the KFP UI draws.
        """
        return {}

    def explain(self, error: Exception, step: int, global_batch: int) -> ConfigError | None:
        """A clearer fatal error for a training-step failure (e.g. a broken input file)."""
        return None

    def summary(self) -> dict[str, Any]:
        """Extra fields for ``training_summary.json``."""
        return {}

    def compatibility(self) -> dict[str, Any]:
        """What a checkpoint of this task depends on (after :meth:`prepare`).

        A checkpoint dir remembers it; resuming with a different value fails fast
        (exit 64) instead of restoring into the wrong variables. Default: all of
        ``args``. Narrow it when some args (a data path, a schedule) may change
        between attempts.
        """
        return {"task_args": self.args}

    def __str__(self) -> str:
        """How logs and reports name the task."""
        return type(self).__name__

    def export(self, model, model_dir: str) -> None:
        """Extra export files beside ``model.keras`` and ``saved_model/`` (chief only)."""


class KerasTask(Task):
    """The shortest path: the model and data you already train with ``model.fit``.

    Implement :meth:`model` (a compiled ``keras.Model``, as you pass it to fit) and
    :meth:`examples` (what you pass fit as data). Each step is the model's own
    ``train_step`` (Keras's, or your override; your ``compute_loss`` too), called as
    fit calls it: compiled losses by name or object, per output with
    ``loss_weights``, batch-mean losses, compiled metrics and the compiled optimizer
    all train as under fit. ``--optimizer`` replaces the compiled optimizer with the
    engine's (``--learning-rate``, ``--warmup-steps``).

    To port a ``model.fit(...)`` call with its arguments, return them from
    :meth:`fit` instead (``FitArgs(x, y, batch_size=..., epochs=..., ...)``): the engine
    reads batch size, epochs, steps per epoch, class weights, the validation split and
    PyDatasets and generators from it (:mod:`spottrain.trainer.fit_plan`).

    The engine shuffles the examples with the run's seed every epoch, batches them at
    the run's global batch and gives each worker its part; a resume at step *s* starts
    there (arrays and PyDatasets by index; a dataset or generator read through to it).
    Resumes are bit-identical when the data is the same, in the same order, every time.
    """

    #: Examples held in the shuffle buffer (the whole epoch when it is smaller).
    shuffle_buffer = 10_000
    #: Whether :meth:`examples` gives batches; ``None``: read from the dataset's ops.
    batched: bool | None = None

    def model(self):
        """A compiled ``keras.Model``, as you would pass it to ``fit``."""
        raise NotImplementedError

    def fit(self) -> FitArgs:
        """What you pass ``model.fit``, moved unchanged: ``return FitArgs(x, y, epochs=3, ...)``.

        The default is ``FitArgs(self.examples())``: a task that only gives its data.
        """
        return FitArgs(self.examples())

    def examples(self):
        """One epoch of the data, in a fixed order: what you would pass ``fit``.

        Arrays ``x`` (a model that needs no labels), ``(x, y)`` or ``(x, y,
        sample_weight)`` (lists or dicts of arrays for several inputs or outputs), a
        ``tf.data.Dataset`` of batches (as fit takes it) or of single examples.
        """
        raise NotImplementedError

    @classmethod
    def fit_step(cls) -> bool:
        """The model's own ``train_step`` is the step (``model.fit``'s)."""
        return True

    def build_model(self):
        """The compiled model."""
        model = self.model()
        if not getattr(model, "compiled", True):
            raise ConfigError(
                f"{type(self).__name__}.model() must return a compiled model "
                "(model.compile(...), as model.fit needs)"
            )
        return model

    def train_dataset(self, spec: TrainInput):
        """This worker's batches of what :meth:`fit` gives (:mod:`spottrain.trainer.fit_plan`)."""
        from spottrain.trainer import fit_plan

        return fit_plan.train_dataset(self, spec)
