"""The loop around a KerasTask's step (in-process): epochs, validation, callbacks' state.

The 2-worker runs with a preemption are in tests/integration/trainer/test_fit_loop.py.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from spottrain.exits import ConfigError
from spottrain.trainer import calls, config, fit_callbacks, fit_step, fit_validation, steps


def _model():
    inputs = keras.Input((2,))
    outputs = keras.layers.Dense(3, activation="softmax")(keras.layers.Dense(8)(inputs))
    model = keras.Model(inputs, outputs)
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 2)).astype("float32"), rng.integers(0, 3, n)


class _Loop:
    """A fake ``make_train_loop``: records how many steps each call was asked for."""

    def __init__(self):
        self.asked = []

    def __call__(self, n, stop, save):
        n = int(n)
        self.asked.append(n)
        # [done, first, loss, stop, save, bad, accuracy, sum of loss, sum of accuracy]
        return np.array([n, 1.0, 1.0, 0.0, 0.0, 0.0, 0.5, float(n), 0.5 * n])


def test_no_call_of_several_steps_crosses_an_epoch_end():
    loop = _Loop()
    fns = steps.StepFunctions(None, None, lambda it: loop, False, ["accuracy"])
    cfg = config.TrainConfig(steps_per_loop=8, save_every_steps=1000)
    caller = calls.Caller(
        fns, iter(()), cfg=cfg, total_steps=23, stop=type("S", (), {"is_set": lambda s: False})(),
        multi_worker=False, agree=lambda m: m, blame=None, step_error=lambda *a: None,
        epoch_steps=5,
    )  # fmt: skip
    state = calls.LoopState(step=3, last_log_step=3)  # resumed mid-epoch
    while state.step < 23:
        call = caller.run(state)
        state.step += call.done
    assert loop.asked == [2, 5, 5, 5, 3]  # to 5, 10, 15, 20, then the end
    assert call.metrics == [0.5] and call.sums == [3.0, 1.5]  # [loss, accuracy] summed


def test_the_logs_fit_shows_are_carried_as_shares_of_the_replicas():
    import tensorflow as tf

    logs = {"loss": tf.constant(2.0), "accuracy": tf.constant(0.5), "mae": tf.constant(1, "int32")}
    names, values = fit_step.step_metrics(logs, replicas=2)
    assert names == ["accuracy", "mae"] and [float(v) for v in values] == [0.25, 0.5]
    logs["cm"] = tf.zeros((3, 3))  # not a scalar: not on the step line
    assert fit_step.step_metrics(logs, replicas=1)[0] == ["accuracy", "mae"]


def test_validation_is_what_model_evaluate_gives():
    import tensorflow as tf

    model = _model()
    x, y = _data(100)
    model.fit(x, y, epochs=1, verbose=0)  # built and trained a little
    want = model.evaluate(x, y, batch_size=32, return_dict=True, verbose=0)
    strategy = tf.distribute.get_strategy()
    got = fit_validation.Validation(model, strategy, (x, y), 32, None).run()
    assert got == pytest.approx({f"val_{k}": v for k, v in want.items()}, rel=1e-6)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(7)  # as fit takes it
    again = fit_validation.Validation(model, strategy, dataset, 32, None).run()
    assert again == pytest.approx(got, rel=1e-6)
    some = fit_validation.Validation(model, strategy, (x, y), 32, 2).run()  # validation_steps
    want = model.evaluate(x[:64], y[:64], batch_size=32, return_dict=True, verbose=0)
    assert some == pytest.approx({f"val_{k}": v for k, v in want.items()}, rel=1e-6)


@pytest.mark.parametrize(
    "freq, epochs", [(1, [1, 2, 3, 4, 5, 6]), (2, [2, 4, 6]), ([1, 5], [1, 5])]
)
def test_validation_freq_is_fits(freq, epochs):
    assert [e + 1 for e in range(6) if fit_validation.should_run(e, freq)] == epochs


def test_a_bad_validation_freq_is_one_line():
    with pytest.raises(ConfigError, match="validation_freq 'x' must be an integer or a list"):
        fit_validation.should_run(0, "x")


@pytest.mark.parametrize(
    "callback, named",
    [
        (lambda: keras.callbacks.ModelCheckpoint("/tmp/m.keras"), "ModelCheckpoint is refused"),
        (lambda: keras.callbacks.BackupAndRestore("/tmp/b"), "BackupAndRestore is refused"),
        (lambda: "early", "'early' is not a keras.callbacks.Callback"),
    ],
)
def test_callbacks_the_engine_does_the_job_of_are_refused(callback, named):
    with pytest.raises(ConfigError, match=named) as e:
        fit_callbacks.build(
            [callback()], _model(), is_chief=True, tensorboard_dir="", resumed=False, params={}
        )
    assert "\n" not in str(e.value)


def _callbacks(model):
    plateau = keras.callbacks.ReduceLROnPlateau("val_loss", patience=2, cooldown=1)
    stop = keras.callbacks.EarlyStopping("val_loss", patience=3, restore_best_weights=True)
    return fit_callbacks.build(
        [plateau, stop], model, is_chief=True, tensorboard_dir="", resumed=False, params={}
    )


def test_callbacks_state_survives_a_restart_so_they_decide_the_same():
    """ReduceLROnPlateau's wait/best/cooldown and EarlyStopping's wait/best/best_weights,
    kept at a save and set again after on_train_begin (which resets them)."""
    import json

    model = _model()
    model.fit(*_data(40), verbose=0)
    losses = [1.0, 0.9, 0.95, 0.97, 0.85, 0.96, 0.97, 0.98]
    one = _callbacks(model)
    one.on_train_begin()
    for epoch, loss in enumerate(losses[:4]):
        one.on_epoch_end(epoch, {"val_loss": loss})
    saved = json.loads(json.dumps(fit_callbacks.state(one)))  # as the checkpoint keeps it
    rest = [one.on_epoch_end(e + 4, {"val_loss": v}) for e, v in enumerate(losses[4:])]
    assert rest and model.stop_training  # the uninterrupted run stopped at the last epoch

    model.stop_training = False
    two = _callbacks(model)
    two.on_train_begin()
    fit_callbacks.restore(two, saved)
    for epoch, loss in enumerate(losses[4:]):
        assert not model.stop_training
        two.on_epoch_end(epoch + 4, {"val_loss": loss})
    assert model.stop_training
    a, b = one.callbacks[1], two.callbacks[1]
    assert (a.stopped_epoch, a.best, a.wait) == (b.stopped_epoch, b.best, b.wait)
    for x, y in zip(a.best_weights, b.best_weights, strict=True):
        np.testing.assert_array_equal(x, y)
    p, q = one.callbacks[0], two.callbacks[0]
    assert (p.wait, p.best, p.cooldown_counter) == (q.wait, q.best, q.cooldown_counter)


def test_a_callback_that_raises_is_one_line_naming_it():
    class Broken(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise KeyError("val_auc")

    callbacks = fit_callbacks.build(
        [keras.callbacks.History(), Broken()], _model(), is_chief=True, tensorboard_dir="",
        resumed=False, params={},
    )  # fmt: skip
    callbacks.on_train_begin()
    try:
        callbacks.on_epoch_end(0, {"loss": 1.0})
    except KeyError as e:
        line = str(fit_callbacks.failure(callbacks, "on_epoch_end", e))
    assert line == "FitArgs.callbacks: Broken.on_epoch_end raised KeyError: 'val_auc'"


def test_numpy_scalars_in_a_callbacks_state_come_back_as_numpy_scalars():
    """model.get_weights() gives 0-d weights as NumPy scalars; EarlyStopping's
    best_weights keeps them and set_weights needs their shape (a restored int has none:
    'int' object has no attribute 'shape' at on_train_end, after a resume)."""
    import json

    import keras

    class Holder(keras.callbacks.Callback):
        pass

    one, two = Holder(), Holder()
    one.kept = [np.int64(3), np.float32(0.5), np.zeros((2, 2), "float32")]
    cbs = keras.callbacks.CallbackList([one], model=_model())
    saved = json.loads(json.dumps(fit_callbacks.state(cbs)))
    fit_callbacks.restore(keras.callbacks.CallbackList([two], model=_model()), saved)
    assert [type(v) for v in two.kept] == [np.int64, np.float32, np.ndarray]
    assert [np.shape(v) for v in two.kept] == [(), (), (2, 2)]
    assert two.kept[0] == 3 and two.kept[1] == np.float32(0.5)
