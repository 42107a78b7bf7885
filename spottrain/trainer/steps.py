"""The engine's compiled step: the task's forward and backward pass plus the vote.

Every step all-reduces ``[loss, stop, save, bad]`` with the gradients' collectives,
so every worker learns in the same step that one of them got a preemption notice (or
that the time-based save is due) and all save that step together. ``bad`` counts the
replicas whose gradients were not finite though the loss may be: a NaN input that a
fused ReLU turns to 0 (oneDNN's MatMul+BiasAdd+Relu on CPU did, TF 2.21) leaves the
loss finite while its gradient makes the weights NaN, and every later loss stays
finite too. A loop of several steps per call (``--steps-per-loop``) ends at the first
step whose vote says stop or save, or whose loss or gradients are not finite: the
vote is the same number on every worker, so every worker ends the loop at the same
step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("trainer")


@dataclass(frozen=True)
class StepParts:
    """What a step is made of: the built model and optimizers, the task, the strategy."""

    cfg: Any  # config.TrainConfig
    task: Any  # task_api.Task
    model: Any
    optimizer: Any  # the engine's (clipping, loss scaling); None for a task's own
    optimizers: dict
    strategy: Any
    global_batch: int
    replicas: int
    blame: Any  # task_calls.Blame: which part of the task a failure came from


@dataclass(frozen=True)
class StepFunctions:
    """The compiled step, three ways, each returning the all-reduced ``[loss, stop, save, bad]``.

    ``train_step(batch, stop, save)`` runs one step on a batch the caller fetched;
    ``make_train_next(iterator)`` returns a step that fetches its own batch;
    ``make_train_loop(iterator)`` returns ``loop(n, stop, save)``, several steps a call.
    ``xla``: whether XLA compiles the step.
    """

    train_step: Callable
    make_train_next: Callable
    make_train_loop: Callable
    xla: bool
    # A fit step's logs besides the loss ("accuracy", ...), in the order the vote carries
    # their means over replicas after ``[loss, stop, save, bad]``; filled when traced.
    metric_names: list = field(default_factory=list)


def use_xla(cfg, strategy, model, fit: bool = False) -> bool:
    """``--jit-compile``: on, off, or model.fit's ``auto`` rule.

    Keras 3's rule (``keras/src/trainers/trainer.py``, ``_resolve_auto_jit_compile``
    and ``model_supports_jit``): off on a machine without an accelerator, off under a
    ``tf.distribute`` strategy, off with op determinism, else on when every layer
    supports it. Our one-device runs use the default strategy, which fit does not
    count as a strategy either.

    With ``fit`` (a ``KerasTask``), ``auto`` is what fit would do: ``model.jit_compile``,
    which ``compile(jit_compile=...)`` set (``Trainer.compile``: an explicit bool as
    given, unless ``model_supports_jit`` says no; ``"auto"`` resolved by the rule above
    when compiled, in the strategy's scope on a gang). ``on`` and ``off`` override it.
    """
    import tensorflow as tf

    if cfg.jit_compile != "auto":
        return cfg.jit_compile == "on"
    if fit:
        return bool(getattr(model, "jit_compile", False))
    accelerators = [d for d in tf.config.list_physical_devices() if d.device_type != "CPU"]
    return bool(
        accelerators
        and strategy.num_replicas_in_sync == 1
        and not cfg.deterministic
        and all(
            getattr(layer, "supports_jit", True)
            for layer in getattr(model, "_flatten_layers", lambda: [model])()
        )
    )


def resumable(concrete, cfg):
    """``concrete``, unless ``--deterministic`` and a resume would not repeat its draws.

    Refused before the step's first run: its stateful random ops
    (:func:`spottrain.trainer.resume_probe.step_problem`), one line as in ``--check``.
    """
    if cfg.deterministic:
        from spottrain.exits import ConfigError
        from spottrain.trainer import resume_probe

        problem = resume_probe.step_problem(concrete.graph)
        if problem:
            raise ConfigError(f"--deterministic: {problem}")
    return concrete


def make_step_functions(parts: StepParts) -> StepFunctions:
    """The step functions of ``parts`` (see :class:`StepFunctions`).

    The step's maths on a replica is :class:`~spottrain.trainer.step_maths.ReplicaUpdate`'s;
    this makes the functions that run it (as Keras's ``TensorFlowTrainer`` separates
    ``train_step`` from ``make_train_function``): the vote, the fetch, the loop.
    """
    import tensorflow as tf

    from spottrain.trainer.step_maths import ReplicaUpdate

    blame = parts.blame  # names the task's part a failure at trace or run time came from
    cfg, strategy = parts.cfg, parts.strategy
    maths = ReplicaUpdate(parts)
    fn, xla = maths.compiled(use_xla(cfg, strategy, parts.model, fit=maths.fit))
    fit, metric_names = maths.fit, maths.metric_names

    def replica_step(batch, stop_local, save_local):
        # fit's step takes the element as it is, and returns its logs' shares too.
        if fit:
            (loss, values), bad = fn(batch), tf.constant(0.0)
        else:
            (loss, bad), values = fn(*batch), []
        return tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, tf.stack([loss, stop_local, save_local, bad, *values])
        )

    def run_step(batch, stop_local, save_local):
        out = strategy.run(replica_step, args=(batch, stop_local, save_local))
        return strategy.experimental_local_results(out)[0]

    @tf.function
    def train_step(batch, stop_local, save_local):
        # The batch is fetched by the caller: the profiler's window times the
        # input wait and the step apart.
        return run_step(batch, stop_local, save_local)

    def make_train_next(iterator):
        """The step that fetches its own batch from ``iterator`` (captured, not an argument).

        A Python-side next() on a distributed iterator plus the dispatch of the
        batch's (or the iterator's) structure cost ~0.3 ms a step (cProfile of
        bench/trainer_overhead.py --task keras): nothing for a 100 ms ResNet step,
        most of a tiny model's. Captured, the call dispatches two scalars.
        """

        @tf.function
        def step(stop_local, save_local):
            with blame("train_dataset"):
                batch = next(iterator)
            return run_step(batch, stop_local, save_local)

        # Traced once for two float32 scalars and then called directly: the
        # polymorphic function's per-call dispatch (its cache lookup over the
        # captures) would cost another ~0.2 ms a step.
        scalar = tf.TensorSpec([], tf.float32)
        return resumable(step.get_concrete_function(scalar, scalar), cfg)

    def make_train_loop(iterator):
        """Up to ``n`` steps in one call, each fetching its batch from ``iterator``.

        Returns ``[steps run, the first step's loss, the last step's loss, stop votes,
        save votes, bad, its metrics...]`` and then the sums over the steps run of ``[loss,
        metrics...]`` (an epoch's means count every step). The loop ends early after the
        step whose all-reduced vote says stop or save, or whose loss or gradients are not
        finite: the same step on every worker.
        """

        @tf.function
        def loop(n, stop_local, save_local):
            with blame("train_dataset"):
                batch = next(iterator)
            out = run_step(batch, stop_local, save_local)
            first = out[0]

            def summed(out):  # [loss, metrics...] of a step
                return tf.concat([out[:1], out[4:]], 0)

            def more(done, out, total):
                go_on = (out[1] == 0.0) & (out[2] == 0.0) & (out[3] == 0.0)
                go_on = go_on & tf.math.is_finite(out[0])
                return (done < n) & go_on

            def body(done, out, total):
                with blame("train_dataset"):
                    batch = next(iterator)
                out = run_step(batch, stop_local, save_local)
                return done + 1, out, total + summed(out)

            done, out, total = tf.while_loop(more, body, (tf.constant(1), out, summed(out)))
            return tf.concat([tf.stack([tf.cast(done, tf.float32), first]), out, total], 0)

        scalar = tf.TensorSpec([], tf.float32)
        int32 = tf.TensorSpec([], tf.int32)
        return resumable(loop.get_concrete_function(int32, scalar, scalar), cfg)

    return StepFunctions(train_step, make_train_next, make_train_loop, xla, metric_names)
