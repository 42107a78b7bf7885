"""The engine's compiled step: the task's forward and backward pass plus the vote.

Every step all-reduces ``[loss, stop, save]`` with the gradients' collectives, so
every worker learns in the same step that one of them got a preemption notice (or
that the time-based save is due) and all save that step together.
"""

from __future__ import annotations


def make_step_functions(trainer):
    """``(train_step, make_train_next)`` for a built ``Trainer``.

    ``train_step(batch, stop, save)`` runs one step on a batch the caller fetched;
    ``make_train_next(iterator)`` returns a step that fetches its own batch. Both
    return the all-reduced ``[loss, stop votes, save votes]`` of the step.
    """
    import tensorflow as tf

    from spottrain.trainer import task_calls

    blame = trainer.blame  # names the task's part a failure at trace or run time came from
    cfg, model, optimizer, task = trainer.cfg, trainer.model, trainer.optimizer, trainer.task
    strategy, gb, replicas = trainer.strategy, trainer.global_batch, trainer.replicas
    # Clipping and loss scaling must see the *global* gradient (and every
    # worker must agree on whether it is finite), so then we all-reduce it
    # ourselves and hand each replica 1/replicas of it to the optimizer,
    # whose own sum restores the total. Costs a second gradient all-reduce.
    reduce_first = bool(cfg.clip_norm) or cfg.mixed_precision

    def own_step_fn(features, labels, stop_local, save_local):
        with blame("train_step"):
            loss = task_calls.step_loss(
                task.train_step(model, trainer.optimizers, features, labels, gb)
            )
        return tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, tf.stack([loss, stop_local, save_local])
        )

    def step_fn(features, labels, stop_local, save_local):
        with tf.GradientTape() as tape:
            with blame("model"):
                outputs = model(features, training=True)
            with blame("loss"):
                per_example = task_calls.per_example_loss(task.loss(labels, outputs), labels)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=gb)
            scaled = optimizer.scale_loss(loss) if cfg.mixed_precision else loss
        variables = model.trainable_variables
        grads = tape.gradient(scaled, variables)
        ctx = tf.distribute.get_replica_context()
        if reduce_first:
            grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
            if cfg.clip_norm:
                scale = tf.cast(optimizer.dynamic_scale, tf.float32) if cfg.mixed_precision else 1.0
                grads, _ = tf.clip_by_global_norm([g / scale for g in grads], cfg.clip_norm)
                grads = [g * scale for g in grads]
            grads = [g / replicas for g in grads]
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.stack([loss, stop_local, save_local]))

    def run_step(batch, stop_local, save_local):
        features, labels = batch
        fn = own_step_fn if task.has_own_step() else step_fn
        out = strategy.run(fn, args=(features, labels, stop_local, save_local))
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
        return step.get_concrete_function(scalar, scalar)

    return train_step, make_train_next
