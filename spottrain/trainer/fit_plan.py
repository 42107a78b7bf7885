"""One place the engine asks what a ``KerasTask``'s ``model.fit`` arguments mean for this run.

:func:`resolve` reads the task's ``fit()`` (a :class:`~spottrain.trainer.fit_args.FitArgs`)
and the engine's flags into a frozen :class:`FitPlan`: the global batch, the epochs and
their steps, the run's final step, the train dataset maker
(:mod:`spottrain.trainer.fit_sources`), and fit's validation and callback arguments,
passed through for the engine's validation and callbacks.

Precedence (docs/task-api.md):

- **global batch**: ``--global-batch-size`` when given, else ``FitArgs.batch_size`` (fit's
  ``batch_size`` is the global batch under a strategy), else ``--batch-size-per-replica``
  x replicas. A PyDataset's or generator's batches are the global batches (their size;
  a different ``--global-batch-size`` is refused). Not divisible by the replicas: refused.
- **length**: ``--train-steps``, else ``--epochs``, else ``FitArgs.epochs``; an epoch is
  ``steps_per_epoch`` steps (given, else examples // global batch: the remainder is
  dropped; a PyDataset's ``len``). ``initial_epoch`` ``I``: the run trains epochs
  ``I .. epochs - 1``, so its steps ``0 .. total`` read data positions from ``I x spe``;
  the epoch of engine step ``s`` (1-based, the step that just ran) is :meth:`FitPlan.epoch_of`.

A plain ``Task`` keeps the flags' path (:mod:`spottrain.trainer.run_length`).
"""

from __future__ import annotations

import inspect
import logging
import math
from dataclasses import dataclass, field
from typing import Any

from spottrain.exits import ConfigError
from spottrain.trainer import fit_dataset, fit_sources
from spottrain.trainer.fit_args import FitArgs

log = logging.getLogger("trainer")

__all__ = ["FitPlan", "resolve", "train_dataset"]


@dataclass(frozen=True)
class FitPlan:
    """A ``KerasTask``'s ``fit()`` resolved for one run (see the module)."""

    global_batch: int
    steps_per_epoch: int | None  # None: a stream of unknown length, run by --train-steps
    epochs: float  # epochs the run reaches (initial_epoch + its steps' epochs)
    initial_epoch: int
    total_steps: int
    kind: str  # arrays, dataset, PyDataset, generator
    examples: int | None  # train examples an epoch, when known
    shuffle: bool
    class_weight: Any
    # Fit's other arguments, unconsumed here: the engine's validation and callbacks read them.
    callbacks: Any = None
    validation_data: Any = None  # FitArgs.validation_data, else validation_split's part
    validation_steps: int | None = None
    validation_batch_size: int | None = None
    validation_freq: Any = 1
    make_dataset: Any = field(default=None, repr=False, compare=False)

    @property
    def first_position(self) -> int:
        """The data position of the run's step 0: ``initial_epoch x steps_per_epoch``."""
        return self.initial_epoch * (self.steps_per_epoch or 0)

    def epoch_of(self, step: int) -> int:
        """The (0-based, fit's) epoch engine step ``step`` (1-based, just run) belongs to."""
        if not self.steps_per_epoch:
            return self.initial_epoch
        return (self.first_position + step - 1) // self.steps_per_epoch

    def ends_epoch(self, step: int) -> bool:
        """Whether engine step ``step`` (1-based) is the last of its epoch."""
        spe = self.steps_per_epoch
        return bool(spe) and (self.first_position + step) % spe == 0

    def train_dataset(self, spec):
        """This worker's dataset for ``spec`` (a ``TrainInput``): as ``Task.train_dataset``."""
        return self.make_dataset(spec)


def fit_args(task) -> FitArgs:
    """The task's ``fit()``, checked to be a ``FitArgs``."""
    from spottrain.trainer.user_code import call_task

    args = call_task(data_owner(task), task.fit)  # fit()'s default calls examples(): named so
    if not isinstance(args, FitArgs):
        raise ConfigError(
            f"{type(task).__name__}.fit() returned {type(args).__name__}, not FitArgs: "
            "return FitArgs(x, y, ...) (from spottrain import FitArgs)"
        )
    return args


def data_owner(task) -> str:
    """How a line names the data's origin: ``T.fit()``, or ``T.examples()`` (fit's default)."""
    # KerasTask's own fit() is FitArgs(self.examples()): named by its qualified name, not
    # by importing the Task API, which imports this module.
    method = "examples" if type(task).fit.__qualname__ == "KerasTask.fit" else "fit"
    return f"{type(task).__name__}.{method}()"


def _source(task) -> tuple[FitArgs, fit_sources.Source]:
    """The task's fit arguments and data, classified once a task object (cached on it)."""
    cached = task.__dict__.get("_fit_source")
    if cached is None:
        args = fit_args(task)
        owner = data_owner(task)
        cached = (args, fit_sources.classify(args, owner, task.batched))
        if fit_sources.is_generator(args.x) and not inspect.isgeneratorfunction(args.x):
            task.__dict__.setdefault("_fit_generators", []).append(args.x)  # read from now
        task._fit_source = cached
    return cached


def _positive_int(value, name: str, owner: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{owner}: {name}={value!r} must be a positive whole number")
    return value


def _global_batch(args: FitArgs, src, cfg, replicas: int, owner: str) -> int:
    given = cfg.global_batch_size if cfg is not None else 0
    if src.batch is not None:  # a PyDataset's or a generator's own batches
        if given and given != src.batch:
            raise ConfigError(
                f"--global-batch-size {given}: the task's {src.kind} gives batches of "
                f"{src.batch} (its batches are the global batches, as under model.fit)"
            )
        batch, said = src.batch, f"the {src.kind}'s batch of {src.batch}"
    elif given:
        batch, said = given, f"--global-batch-size {given}"
    elif args.batch_size is not None:
        batch = _positive_int(args.batch_size, "batch_size", owner)
        said = f"{owner}'s batch_size={batch}"
    else:
        per_replica = cfg.batch_size_per_replica if cfg is not None else 32
        return per_replica * replicas
    if batch % replicas:
        raise ConfigError(
            f"{said} is not divisible by the {replicas} replicas in sync (fit's batch_size is "
            "the global batch: each replica takes an equal part)"
        )
    return batch


def _steps_per_epoch(args: FitArgs, src, global_batch: int, owner: str) -> int | None:
    given = _positive_int(args.steps_per_epoch, "steps_per_epoch", owner)
    natural = None
    if src.kind == fit_sources.PYDATASET:
        natural = src.batches
    elif src.examples is not None:
        natural = src.examples // global_batch
        if src.examples == 0:
            raise ConfigError(f"{owner} gave no examples (an empty array or dataset)")
        if natural == 0:
            raise ConfigError(
                f"{owner}: {src.examples} examples are fewer than one global batch of "
                f"{global_batch}: lower the batch"
            )
    if given and natural is not None and given > natural:
        raise ConfigError(
            f"{owner}: steps_per_epoch={given} is more than the {natural} batches of "
            f"{global_batch} an epoch of the data holds"
        )
    return given or natural


def resolve(task, cfg, replicas: int, *, need_length: bool = True) -> FitPlan:
    """The plan of a ``KerasTask`` for a run with ``replicas`` replicas (see the module).

    Args:
        task: The ``KerasTask``.
        cfg: The engine's ``TrainConfig`` (``None``: the flags' defaults, as a reference does).
        replicas: Replicas in sync.
        need_length: False for ``--check`` without ``--train-steps``/``--epochs``: a task
            whose length is unknown then gets 100 steps instead of the run's error.
    """
    args, src = _source(task)
    owner = data_owner(task)
    initial = args.initial_epoch
    if isinstance(initial, bool) or not isinstance(initial, int) or initial < 0:
        raise ConfigError(f"{owner}: initial_epoch={initial!r} must be a whole number >= 0")
    global_batch = _global_batch(args, src, cfg, replicas, owner)
    spe = _steps_per_epoch(args, src, global_batch, owner)
    train_steps = cfg.train_steps if cfg is not None else 0
    flag_epochs = cfg.epochs if cfg is not None else 0
    if train_steps:
        total = train_steps
    elif spe is None and (flag_epochs or need_length):
        said = f"--epochs {flag_epochs:g}" if flag_epochs else f"epochs={args.epochs}"
        raise ConfigError(
            f"{said}: {owner}'s {src.kind} has no length (no number of examples or batches): "
            "give steps_per_epoch in FitArgs, or --train-steps"
        )
    elif spe is None:
        total = 100  # --check alone: enough for its probe
    else:
        epochs = flag_epochs or args.epochs
        if not (isinstance(epochs, int | float) and math.isfinite(epochs) and epochs > initial):
            said = f"--epochs {flag_epochs:g}" if flag_epochs else f"epochs={epochs!r}"
            raise ConfigError(f"{said} must be more than {owner}'s initial_epoch={initial}")
        total = max(1, math.ceil((epochs - initial) * spe))
    validation = args.validation_data
    if validation is None and src.held_out is not None:
        validation = src.held_out
    plan = FitPlan(
        global_batch=global_batch,
        steps_per_epoch=spe,
        epochs=(initial + total / spe) if spe else initial,
        initial_epoch=initial,
        total_steps=total,
        kind=src.kind,
        examples=src.examples,
        shuffle=bool(args.shuffle),
        class_weight=args.class_weight,
        callbacks=args.callbacks,
        validation_data=validation,
        validation_steps=args.validation_steps,
        validation_batch_size=args.validation_batch_size,
        validation_freq=args.validation_freq,
        make_dataset=lambda spec: train_dataset(task, spec),
    )
    task._fit_plan = plan
    return plan


def train_dataset(task, spec):
    """A ``KerasTask``'s pipeline for ``spec``: the plan's, or fit's defaults without one.

    Without a resolved plan (a reference run calling ``task.train_dataset`` directly),
    ``steps_per_epoch`` is the given one or examples // ``spec.global_batch``.
    """
    args, src = _source(task)
    plan = task.__dict__.get("_fit_plan")
    if plan is not None and plan.global_batch == spec.global_batch:
        spe, first = plan.steps_per_epoch, plan.first_position
    else:
        owner = data_owner(task)
        spe = _steps_per_epoch(args, src, spec.global_batch, owner)
        first = args.initial_epoch * (spe or 0)
    window = fit_sources.Window(spec, spe, first, bool(args.shuffle), args.class_weight)
    if src.kind == fit_sources.ARRAYS:
        return fit_sources.arrays_dataset(src, window)
    if src.kind == fit_sources.PYDATASET:
        return fit_sources.pydataset_dataset(src, window)
    if src.kind == fit_sources.GENERATOR:
        gen = _fresh_generator(task)  # here, so that a generator given twice is one line
        return fit_sources.generator_dataset(lambda: gen, src, window)
    # A dataset: made anew for every pipeline (a seeded shuffle in the user's dataset keeps
    # its iteration count in the dataset object, so a pipeline sharing it with another
    # would read another order than a resumed process does).
    fresh = fit_args(task).x
    owner, said = data_owner(task), task.__dict__.get("_said", False)
    task._said = True
    examples = fit_sources.fit_input.examples_dataset(fresh, task.batched, owner, not said)
    return fit_dataset.dataset_dataset(examples, src, window, task.shuffle_buffer)


def _fresh_generator(task):
    """A generator from its start: the generator function called, or ``fit()`` called again."""
    x = fit_args(task).x
    if inspect.isgeneratorfunction(x):
        return x()
    used = task.__dict__.setdefault("_fit_generators", [])
    if any(x is g for g in used):
        raise ConfigError(
            f"{type(task).__name__}.fit() gave the same generator object twice: the engine "
            "reads it from its start for every pipeline and resume; create it in fit() "
            "(FitArgs(my_gen(), ...)) or give the generator function"
        )
    used.append(x)
    return x
