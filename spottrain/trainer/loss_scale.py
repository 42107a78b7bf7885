"""Dynamic loss scaling on a gang: every replica takes the same finite-or-not branch.

Keras's ``LossScaleOptimizer`` decides on each replica's *local* gradients whether the
step is finite (``keras/src/optimizers/loss_scale_optimizer.py``: ``check_finite``,
called by ``_common_apply`` and, on TensorFlow, by ``_tf_apply``'s
``_handle_cross_replica`` for each replica, whose comment assumes the gradients are
already all-reduced: in Keras 3 they are not). Only the finite branch applies the
inner optimizer, and that apply holds the gradients' all-reduce
(``keras/src/backend/tensorflow/optimizer.py``, ``TFOptimizer._backend_update_step`` →
``_all_reduce_sum_gradients``). Under ``mixed_float16`` a worker whose share of the
batch overflows float16 takes the other branch: it never joins that all-reduce, and
the others wait in it for ever (issue 54: a 2-worker gang stopped at step 17, every
worker idle inside the step call). The watchdog was not at fault there: it ends a
hang ``--hang-timeout`` seconds (default 600) after the last finished step, and that
run was killed 600 s after it *started*; with ``--hang-timeout 30`` it fired here after
30 s with both stacks in the step call (exit 171).

Fix: each ``LossScaleOptimizer`` the engine trains with checks the local gradients as
Keras does and then all-reduces one scalar, the number of replicas that saw a
non-finite gradient; the step is finite only when that number is 0. Every replica then
skips the step (and halves the scale) together, exactly as one replica holding the
whole global batch would, since a sum of gradients is finite only if every part is.
"""

from __future__ import annotations

# Set on a patched optimizer, so that patching it twice does not all-reduce twice.
_AGREED = "_spottrain_agreed_finite"


def agree_across_replicas(optimizers) -> list:
    """Makes every ``LossScaleOptimizer`` in ``optimizers`` agree on finiteness; returns them.

    Patches the instance's ``check_finite`` (not the class: another model in the
    process is left as Keras made it). Nothing is saved with it: a checkpoint or a
    ``model.keras`` holds the optimizer's variables and config only.
    """
    import keras

    patched = []
    for opt in optimizers:
        if not isinstance(opt, keras.optimizers.LossScaleOptimizer) or getattr(opt, _AGREED, 0):
            continue
        object.__setattr__(opt, "check_finite", _agreed(opt.check_finite))
        object.__setattr__(opt, _AGREED, True)
        patched.append(opt)
    return patched


def _agreed(local_check):
    def check_finite(grads):
        import tensorflow as tf

        finite = local_check(grads)
        # Keras calls check_finite in a replica context on both of its paths (directly,
        # or through call_for_each_replica inside merge_call); the default strategy's
        # one replica has nobody to agree with.
        ctx = tf.distribute.get_replica_context()
        if ctx is None or ctx.num_replicas_in_sync == 1:
            return finite
        bad = ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.cast(~finite, tf.float32))
        return tf.equal(bad, 0.0)

    return check_finite
