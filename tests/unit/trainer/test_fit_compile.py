"""What a fit user's compile() asks for (issue 54): jit_compile, run_eagerly, use_ema, loss scaling.

In-process, one replica; the gangs are in tests/integration/trainer/test_mixed_precision_gang.py
and test_fit_compile_options.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from fit_end_tasks import Regression, compiled

from spottrain.exits import ConfigError
from spottrain.trainer import config, fit_end, fit_step, loss_scale, steps, task_calls


def _parts(task, model, cfg):
    import tensorflow as tf

    spec = (tf.TensorSpec([8, 4]), tf.TensorSpec([8]))
    optimizer, optimizers = fit_step.prepare(model, spec, cfg)
    strategy = tf.distribute.get_strategy()
    blame = task_calls.Blame()
    return steps.StepParts(cfg, task, model, optimizer, optimizers, strategy, 8, 1, blame)


def _batch():
    import tensorflow as tf

    rng = np.random.default_rng(1)
    x = rng.normal(size=(8, 4)).astype("float32")
    return tf.constant(x), tf.constant(x.sum(axis=1))


@pytest.mark.parametrize(
    ("compile_args", "flag", "xla"),
    [
        ({}, "auto", False),  # Keras's auto on a machine without an accelerator: off
        ({"jit_compile": True}, "auto", True),  # as fit: the model's own setting
        ({"jit_compile": False}, "auto", False),
        ({"jit_compile": True}, "off", False),  # the flag overrides
        ({}, "on", True),
    ],
)
def test_auto_is_the_compiled_jit_compile_as_fit_reads_it_and_the_flag_overrides(
    compile_args, flag, xla
):
    import tensorflow as tf

    cfg = config.TrainConfig(jit_compile=flag)
    task = Regression({"compile": compile_args}, cfg)
    model = task.build_model()
    fns = steps.make_step_functions(_parts(task, model, cfg))
    assert fns.xla is xla
    zero = tf.constant(0.0)
    out = fns.train_step(_batch(), zero, zero)  # XLA compiles and runs it on this CPU
    assert np.isfinite(float(out[0]))


def test_compiled_with_jit_compile_the_step_trains_as_without():
    import tensorflow as tf

    losses = []
    for jit in (False, True):
        tf.keras.utils.set_random_seed(3)
        cfg = config.TrainConfig()
        task = Regression({"compile": {"jit_compile": jit}}, cfg)
        fns = steps.make_step_functions(_parts(task, task.build_model(), cfg))
        zero = tf.constant(0.0)
        losses.append([float(fns.train_step(_batch(), zero, zero)[0]) for _ in range(3)])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)


def test_run_eagerly_is_refused_in_one_line():
    import tensorflow as tf

    spec = (tf.TensorSpec([8, 4]), tf.TensorSpec([8]))
    with pytest.raises(ConfigError, match=r"^compile\(run_eagerly=True\): the engine runs"):
        fit_step.prepare(compiled(run_eagerly=True), spec, config.TrainConfig())


def test_ema_is_finalized_into_the_weights_only_for_a_fit_task_and_only_with_use_ema():
    import tensorflow as tf

    cfg = config.TrainConfig()
    task = Regression({"use_ema": True}, cfg)
    model = task.build_model()
    fns = steps.make_step_functions(_parts(task, model, cfg))
    zero = tf.constant(0.0)
    for _ in range(5):
        fns.train_step(_batch(), zero, zero)
    raw = [v.numpy() for v in model.trainable_variables]
    averages = [v.numpy() for v in model.optimizer._model_variables_moving_average]
    assert not all(np.array_equal(r, a) for r, a in zip(raw, averages, strict=True))
    assert fit_end.finalize(task, model) is True
    for v, a in zip(model.trainable_variables, averages, strict=True):
        np.testing.assert_array_equal(v.numpy(), a)
    plain = Regression({}, cfg)
    assert fit_end.finalize(plain, plain.build_model()) is False


def test_every_loss_scale_optimizer_is_patched_once_and_others_are_left_alone():
    import keras

    lso = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam())
    adam = keras.optimizers.Adam()
    assert loss_scale.agree_across_replicas([lso, adam]) == [lso]
    assert loss_scale.agree_across_replicas([lso]) == []  # one all-reduce, not two
    # One replica: the local verdict, as Keras's.
    assert bool(lso.check_finite([keras.ops.ones(3)]))
    assert not bool(lso.check_finite([keras.ops.convert_to_tensor([1.0, np.inf])]))


def test_steps_per_execution_is_said_not_silently_dropped(caplog):
    import tensorflow as tf

    spec = (tf.TensorSpec([8, 4]), tf.TensorSpec([8]))
    caplog.set_level("INFO")
    fit_step.prepare(compiled(steps_per_execution=4), spec, config.TrainConfig())
    lines = [r.getMessage() for r in caplog.records if "steps_per_execution" in r.getMessage()]
    assert lines == [
        "compile(steps_per_execution=4) is not read: the engine runs --steps-per-loop 1 "
        "steps a call (give --steps-per-loop 4 for fit's)"
    ]
    caplog.clear()
    fit_step.prepare(compiled(steps_per_execution=4), spec, config.TrainConfig(steps_per_loop=4))
    assert not [r for r in caplog.records if "steps_per_execution" in r.getMessage()]
