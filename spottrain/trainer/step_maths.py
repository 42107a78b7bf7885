"""The step's maths on one replica: the task's forward and backward pass and the update.

Three kinds, by the task: the engine's own (the task's ``loss``, its gradients checked,
clipped and scaled here), a task's own ``train_step``, or a ``KerasTask``'s model's
``train_step`` as ``model.fit`` calls it. :func:`spottrain.trainer.steps.make_step_functions`
makes the functions that run one of them under the strategy, with the vote.
"""

from __future__ import annotations

import logging

log = logging.getLogger("trainer")


class ReplicaUpdate:
    """One replica's step of ``parts`` (a :class:`~spottrain.trainer.steps.StepParts`).

    ``fit``: the model's own step (``metric_names`` is filled with its logs' names when
    it is traced); else the update returns ``(loss, bad)``, ``bad`` 1.0 when a gradient
    is not finite.
    """

    def __init__(self, parts):
        self.parts = parts
        self.fit = bool(parts.task.fit_step())
        self.own = self.fit or parts.task.has_own_step()
        self.metric_names: list = []  # the fit step's logs besides the loss, at trace time
        cfg = parts.cfg
        # Clipping and loss scaling must see the *global* gradient (and every worker must
        # agree on whether it is finite), so then we all-reduce it ourselves and hand
        # each replica 1/replicas of it to the optimizer, whose own sum restores the
        # total. Costs a second gradient all-reduce.
        self.reduce_first = bool(cfg.clip_norm) or cfg.mixed_precision
        self._forward_backward = self.forward_backward

    def compiled(self, xla: bool):
        """``(the update to run, whether XLA compiles it)`` for ``--jit-compile``'s ``xla``."""
        import tensorflow as tf

        p = self.parts
        fn = self.fit_update if self.fit else self.own_update if self.own else self.update
        if xla and p.replicas == 1:
            # All of it, as fit compiles its whole step (the optimizer's update too).
            return tf.function(fn, jit_compile=True), True
        if xla and self.own:
            said = "--jit-compile on" if p.cfg.jit_compile == "on" else "compile(jit_compile=True)"
            log.warning(
                "%s: a model's or task's own train_step is compiled only on one device "
                "(here %d replicas); it runs without XLA",
                said,
                p.replicas,
            )
            return fn, False
        if xla:
            # The gradients' all-reduce and the optimizer's cross-replica update stay
            # outside: XLA compiles the forward and backward pass.
            self._forward_backward = tf.function(self.forward_backward, jit_compile=True)
        return fn, xla

    def own_update(self, features, labels):
        """A task's own ``train_step``."""
        import tensorflow as tf

        from spottrain.trainer import task_calls

        p = self.parts
        with p.blame("train_step"):
            loss = task_calls.step_loss(
                p.task.train_step(p.model, p.optimizers, features, labels, p.global_batch)
            )
        return loss, tf.constant(0.0)  # its gradients are the task's: the loss is the guard

    def fit_update(self, data):
        """Keras's own ``train_step``, or the model's override, as ``model.fit`` calls it."""
        from spottrain.trainer import fit_step

        model, replicas = self.parts.model, self.parts.replicas
        fit_step.reset_metrics(model)
        with self.parts.blame("fit_step"):
            logs = model.train_step(data)
            names, values = fit_step.step_metrics(logs, replicas)
            self.metric_names[:] = names
            loss = fit_step.step_loss(logs, replicas)
        # Again after the step: compiled metrics that Keras builds in the step's first
        # trace (a model _symbolic_build could not build before) have no variables when
        # the reset above is traced, so it resets nothing and their values would run on
        # over the steps. Traced after the reads above, it runs after them (automatic
        # control dependencies keep a function's stateful ops in program order).
        fit_step.reset_metrics(model)
        return loss, values  # Keras applies the gradients inside: the loss is the guard

    def forward_backward(self, features, labels):
        """The loss and its gradients (scaled under mixed precision)."""
        import tensorflow as tf

        from spottrain.trainer import task_calls

        p = self.parts
        with tf.GradientTape() as tape:
            with p.blame("model"):
                outputs = p.model(features, training=True)
            with p.blame("loss"):
                per_example = task_calls.per_example_loss(p.task.loss(labels, outputs), labels)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=p.global_batch)
            scaled = p.optimizer.scale_loss(loss) if p.cfg.mixed_precision else loss
        return loss, tape.gradient(scaled, p.model.trainable_variables)

    def update(self, features, labels):
        """The engine's step: the gradients checked, clipped and applied."""
        import tensorflow as tf

        p, cfg = self.parts, self.parts.cfg
        loss, grads = self._forward_backward(features, labels)
        bad = tf.constant(0.0)
        # Under loss scaling a non-finite gradient is the scale's to handle (the update is
        # skipped and the scale lowered), not a failure. An embedding's gradient is
        # IndexedSlices: its rows are checked, never densified.
        values = [] if cfg.mixed_precision else [getattr(g, "values", g) for g in grads]
        finite = [tf.reduce_all(tf.math.is_finite(v)) for v in values if v is not None]
        if finite:
            bad = 1.0 - tf.cast(tf.reduce_all(tf.stack(finite)), tf.float32)
        if self.reduce_first:
            ctx = tf.distribute.get_replica_context()
            grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
            if cfg.clip_norm:
                opt = p.optimizer
                scale = tf.cast(opt.dynamic_scale, tf.float32) if cfg.mixed_precision else 1.0
                grads, _ = tf.clip_by_global_norm([g / scale for g in grads], cfg.clip_norm)
                grads = [g * scale for g in grads]
            grads = [g / p.replicas for g in grads]
        p.optimizer.apply_gradients(zip(grads, p.model.trainable_variables, strict=True))
        return loss, bad
