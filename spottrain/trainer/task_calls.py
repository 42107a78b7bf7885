"""The engine's calls into a task, checked: each mistake is one line naming the task's method.

A run and ``--check`` build and step a task through these functions, so ``--check``
finds what a run would (a list from ``build_optimizers``, a loss of the wrong shape
or type, an own ``train_step`` that does not trace) and names it the same way: the
task method it came from and the real error, not an engine source line.

Inside the compiled step each call into the task runs under :class:`Blame`: a
``tf.name_scope`` named after the method (a runtime ``OpError`` names its node, so
its method) that also records a Python error raised while the step is traced
(before tf.function rewrites it into an engine frame's message).
"""

from __future__ import annotations

import contextlib
import re

from spottrain import exits, fileio
from spottrain.exits import ConfigError, TrainerExit
from spottrain.trainer.advice import cause, misfit_error
from spottrain.trainer.task_loader import call_task

# How a line names the task's part a step failure came from, by Blame's key.
_PARTS = {
    "train_step": "train_step()",
    "loss": "loss()",
    "model": "model (build_model())",
    "train_dataset": "train_dataset()",
    "fit_step": "model's train_step() (model.fit's step)",
}

# Errors a collective raises when a peer died, froze or was torn down.
PEER_ERRORS = (
    "UnavailableError",
    "DeadlineExceededError",
    "CancelledError",
    "AbortedError",
    "InternalError",
    "UnknownError",
)

_THE_TASKS = "the task's "
_DATASET_HINT = "return a tf.data.Dataset of (features, labels)"


def is_keras_task(task) -> bool:
    """Whether ``task`` is a ``KerasTask``: its author wrote ``model()`` and ``examples()``.

    Known by its shape, not by importing the Task API (which imports this module).
    """
    return task.fit_step() and hasattr(task, "examples")


def named(task, method: str) -> str:
    """How a line names the task's ``method`` (``build_model``, ``train_dataset``).

    A ``KerasTask``'s author wrote ``model()`` and ``examples()`` (or ``fit()``); the
    engine's names for them would send them looking for methods they never wrote.
    """
    if is_keras_task(task):
        if method == "build_model":
            return f"{type(task).__name__}.model()"
        if method == "train_dataset":
            from spottrain.trainer import fit_plan

            return fit_plan.data_owner(task)
    return f"{_THE_TASKS}{method}()"


def no_batch(task, step: int, global_batch: int) -> ConfigError:
    """The line for a task's data that gave no batch for ``step``, the first it was asked."""
    what = named(task, "train_dataset")
    if task.fit_step():
        return ConfigError(
            f"{what} gave no batch for step {step}: it is empty, or holds fewer examples "
            f"than one global batch of {global_batch}"
        )
    return ConfigError(f"{what} is empty at step {step}")


def _kind(value) -> str:
    return "None" if value is None else type(value).__name__


def build_model(task):
    """The task's ``keras.Model``; raising or returning anything else is one line."""
    import keras

    what = named(task, "build_model")
    model = call_task(what, task.build_model)
    if not isinstance(model, keras.Model):
        raise ConfigError(f"{what} must return a keras.Model, got {_kind(model)}")
    return model


def build_optimizers(task, model, cfg):
    """``(engine optimizer or None, optimizers by name)`` for ``model``, in the strategy's scope.

    An own ``train_step`` gets the task's ``build_optimizers()`` (a dict of built
    Keras optimizers by name) or, when it returns ``None``, the engine's optimizer.
    """
    import keras

    own_step = task.has_own_step()
    if own_step and (cfg.clip_norm or cfg.mixed_precision):
        raise ConfigError(
            "--clip-norm and --mixed-precision belong to the engine's step; the task's own "
            "train_step does its own clipping and loss scaling"
        )
    what = "the task's build_optimizers()"
    optimizers = call_task(what, task.build_optimizers, model) if own_step else None
    if optimizers is None:
        from spottrain.trainer import optimizer as optimizer_lib  # Keras: imported only to train

        optimizer = optimizer_lib.build_optimizer(cfg)
        # Build slots before restoring, or their saved values would be dropped.
        optimizer.build(model.trainable_variables)
        return optimizer, {"optimizer": optimizer}
    example = "e.g. {'encoder': sgd, 'head': adam}"
    if not isinstance(optimizers, dict) or not optimizers:
        raise ConfigError(
            f"{what} must return a dict of Keras optimizers by name ({example}) or None, "
            f"got {_kind(optimizers) if optimizers else repr(optimizers)}"
        )
    wrong = [
        f"{name!r}: {_kind(opt)}"
        for name, opt in optimizers.items()
        if not (isinstance(name, str) and isinstance(opt, keras.optimizers.Optimizer))
    ]
    if wrong:
        raise ConfigError(
            f"{what} must map names to Keras optimizers ({example}), got {', '.join(wrong)}"
        )
    unbuilt = [name for name, opt in optimizers.items() if not opt.built]
    if unbuilt:
        raise ConfigError(
            f"{what}: build {', '.join(unbuilt)} on their variables (opt.build(variables)) "
            "so that checkpoints restore their slots"
        )
    return None, dict(optimizers)


def dataset(task, spec):
    """The task's ``train_dataset(spec)``, checked to be a Dataset of ``(features, labels)``."""
    import tensorflow as tf

    what = named(task, "train_dataset")
    ds = call_task(what, task.train_dataset, spec)
    if not isinstance(ds, tf.data.Dataset):
        raise ConfigError(f"{what} must {_DATASET_HINT}, got {_kind(ds)}")
    element = ds.element_spec
    if task.fit_step():  # what model.fit takes: x, (x, y), (x, y, sample_weight)
        return ds
    if not (isinstance(element, tuple) and len(element) == 2):
        shape = type(element).__name__
        if isinstance(element, tuple):
            shape = f"tuples of {len(element)}"
        elif isinstance(element, tf.TensorSpec):
            shape = f"single tensors ({element.dtype.name}, shape {element.shape.as_list()})"
        raise ConfigError(f"{what} must {_DATASET_HINT}; its elements are {shape}")
    return ds


def per_example_loss(loss, labels):
    """The default step's check (at trace time) of ``loss()``: float, shape ``[batch]``."""
    import tensorflow as tf

    if loss is None:
        raise ConfigError("the task's loss() returned None: return one float loss per example")
    loss = tf.convert_to_tensor(loss)
    if not loss.dtype.is_floating:
        raise ConfigError(
            f"the task's loss() must return float losses (one per example), got {loss.dtype.name}"
        )
    rank, batch = loss.shape.rank, _leading(labels)
    other = rank == 1 and None not in (batch, loss.shape[0]) and loss.shape[0] != batch
    if rank is not None and (rank != 1 or other):
        want = f"[{batch}]" if batch is not None else "[batch]"
        raise ConfigError(
            f"the task's loss() must return one value per example (shape {want}), "
            f"got shape {loss.shape.as_list()}"
        )
    return tf.cast(loss, tf.float32)


def _leading(labels) -> int | None:
    import tensorflow as tf

    first = tf.nest.flatten(labels)[:1]
    shape = getattr(first[0], "shape", None) if first else None
    return shape[0] if shape is not None and shape.rank else None


def step_loss(loss):
    """An own ``train_step``'s return value, checked at trace time: a float scalar."""
    import tensorflow as tf

    want = "return this replica's loss, a float32 scalar"
    if loss is None:
        raise ConfigError(f"the task's train_step() returned None: {want}")
    try:
        loss = tf.convert_to_tensor(loss)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"the task's train_step() returned {_kind(loss)}: {want}") from e
    if not loss.dtype.is_floating or (loss.shape.rank not in (None, 0)):
        raise ConfigError(
            f"the task's train_step() must {want}, got {loss.dtype.name} of shape "
            f"{loss.shape.as_list() if loss.shape.rank is not None else 'unknown'}"
        )
    return tf.cast(loss, tf.float32)


class Blame:
    """Names the task part a step failure came from (see the module's docstring)."""

    def __init__(self):
        self._origin = None  # (part, the original exception)

    @contextlib.contextmanager
    def __call__(self, part: str):
        """Runs a call into the task's ``part`` (a key of ``_PARTS``) under its name."""
        import tensorflow as tf

        with tf.name_scope(f"task.{part}"):
            try:
                yield
            except Exception as e:
                # The innermost part is the first to see it; the outer ones see the same.
                if self._origin is None or self._origin[1] is not e:
                    self._origin = (part, e)
                raise

    def origin_of(self, error: BaseException):
        """``(part, original exception)`` when ``error`` is (or wraps) a recorded one."""
        if self._origin is None:
            return None
        seen = set()
        while error is not None and id(error) not in seen:
            if error is self._origin[1]:
                return self._origin
            seen.add(id(error))
            error = error.__cause__ or error.__context__
        return None


_NODE = re.compile(r"(?:Detected at node |\{\{node )'?([^\s'}]+)")


def xla_failure(error: Exception, xla: str | None) -> TrainerExit | None:
    """A step XLA could not compile: one line, exit 64, naming the op and the way out.

    Args:
        error: What the step raised.
        xla: ``--jit-compile``'s value when XLA compiles the step, else None.
    """
    import tensorflow as tf

    text = str(error)
    if not (xla and isinstance(error, tf.errors.OpError) and "XLA" in text):
        return None
    op = re.search(r"on XLA_\w+: (\w+)", text)
    node = re.search(r"\{\{node ([^}]+)\}\}", text)
    if op:
        what = f"op {op.group(1)}" + (f" (node {node.group(1)})" if node else "")
        what += " has no XLA kernel"
    else:
        what = f"{type(error).__name__}: {cause(error)}"
    return ConfigError(
        f"--jit-compile {xla}: XLA cannot compile the training step: {what}; "
        "run with --jit-compile off"
    )


def step_failure(
    error: Exception,
    step: int,
    task,
    blame: Blame,
    global_batch: int,
    multi_worker: bool,
    xla: str | None = None,
) -> TrainerExit | None:
    """What a failed step means: one line and its exit, or ``None`` (an engine bug: re-raise).

    The ``OpError`` family (a string feature the model casts, a failing ``map``, a
    bad shape at run time) is the task's, exit 64, unless the task's ``explain()``
    says better, a peer worker was lost (retryable) or storage failed.

    Args:
        error: What the step raised.
        step: The step that failed (1-based).
        task: The task (its ``explain()`` comes first).
        blame: The step's :class:`Blame`.
        global_batch: The run's global batch.
        multi_worker: Whether peers' collectives can fail the step.
        xla: ``--jit-compile``'s value when XLA compiles the step (its failures first).
    """
    import tensorflow as tf

    failure = xla_failure(error, xla)
    if failure is not None:
        return failure

    origin = blame.origin_of(error)
    if origin is not None and isinstance(origin[1], TrainerExit):
        return origin[1]
    if isinstance(error, tf.errors.OpError):
        explained = task.explain(error, step, global_batch)
        if explained is not None:
            return explained
        name = type(error).__name__
        if multi_worker and name in PEER_ERRORS:
            first = (str(error).strip().splitlines() or [""])[0][:200]
            return TrainerExit(
                exits.PEER_LOST, f"lost a peer worker at step {step} ({name}: {first})"
            )
        failure = fileio.storage_failure(error)
        if failure is not None:
            return failure
    elif origin is None and not isinstance(error, (ValueError, TypeError)):
        return None
    part, original = origin if origin is not None else (_node_part(error), error)
    text = f"{type(original).__name__}: {cause(original)}"
    if part == "model":
        source = named(task, "build_model").removeprefix(_THE_TASKS)
        return ConfigError(
            f"the task's batches do not fit its model at step {step} "
            f"(the model from {source} raised {text})"
        )
    if part is None:
        if not isinstance(error, tf.errors.OpError):
            return misfit_error(original, step)
        return ConfigError(f"the task's step failed at step {step} ({text})")
    if part == "train_dataset":
        return ConfigError(f"{named(task, part)} failed at step {step} ({text})")
    whose = "the" if part == "fit_step" else "the task's"
    return ConfigError(f"{whose} {_PARTS[part]} failed at step {step} ({text})")


def _node_part(error: Exception) -> str | None:
    """The task part whose name scope a runtime error's node is in (the innermost)."""
    node = _NODE.search(str(error))
    scopes = re.findall(r"task\.(\w+)/", node.group(1)) if node else []
    parts = [p for p in scopes if p in _PARTS]
    return parts[-1] if parts else None
