"""KerasTask takes what model.fit takes (issue 41): data, the step's loss, the optimizer, export.

In-process; the public examples that train end to end are in
tests/integration/trainer/test_keras_io_*.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from spottrain.exits import ConfigError
from spottrain.trainer import config, export, fit_input, fit_step
from spottrain.trainer.task_api import KerasTask, TrainInput


def _ds(n=12):
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices((np.arange(n * 2.0).reshape(n, 2), np.arange(n)))


@pytest.mark.parametrize(
    ("make", "batched"),
    [
        (lambda: _ds(), False),
        (lambda: _ds().batch(4), True),
        (lambda: _ds().batch(4).map(lambda x, y: (x, y)).cache().prefetch(2), True),
        (lambda: _ds().padded_batch(4), True),
        (lambda: _ds().batch(4).unbatch().map(lambda x, y: (x, y)), False),
        (lambda: _ds().map(lambda x, y: (x, y)).shuffle(4, seed=1), False),
    ],
    ids=["slices", "batch", "batch-map-cache", "padded", "unbatched", "map-shuffle"],
)
def test_a_dataset_of_batches_is_told_from_one_of_examples(make, batched):
    assert fit_input.is_batched(make()) is batched


def test_a_batched_dataset_gives_its_examples_once_each_in_order():
    ds = fit_input.examples_dataset(_ds().batch(5), None, "T.examples()")
    labels = [int(y) for _, y in ds.as_numpy_iterator()]
    assert labels == list(range(12))  # the short last batch too


@pytest.mark.parametrize(
    ("value", "shapes"),
    [
        (np.zeros((6, 3)), [(3,)]),  # x alone (an autoencoder's, a VAE's)
        ((np.zeros((6, 3)), np.zeros(6)), [(3,), ()]),
        ([np.zeros((6, 3)), np.zeros(6)], [(3,), ()]),  # a list, as fit's x
        (([np.zeros((6, 2)), np.zeros((6, 4))], np.zeros(6)), [(2,), (4,), ()]),  # two inputs
        (({"a": np.zeros((6, 2)), "b": np.zeros((6, 5))}, np.zeros((6, 1))), [(2,), (5,), (1,)]),
        ((np.zeros((6, 3)), np.zeros(6), np.ones(6)), [(3,), (), ()]),  # sample weights
    ],
    ids=["x", "x-y", "list", "two-inputs", "dicts", "x-y-w"],
)
def test_arrays_as_fit_takes_them_become_single_examples(value, shapes):
    import tensorflow as tf

    ds = fit_input.examples_dataset(value, None, "T.examples()")
    got = [tuple(s.shape) for s in tf.nest.flatten(ds.element_spec)]
    assert got == shapes
    assert len(list(ds)) == 6


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (None, "T.examples() returned None"),
        ((np.zeros((6, 3)), np.zeros(5)), "must return what model.fit takes"),
        ("some text", "must return what model.fit takes"),
    ],
)
def test_data_fit_would_not_take_is_one_line_naming_the_method(value, said):
    with pytest.raises(ConfigError) as e:
        fit_input.examples_dataset(value, None, "T.examples()")
    assert said in str(e.value) and "\n" not in str(e.value)


class _TwoInputs(KerasTask):
    def examples(self):
        n = np.arange(32.0)
        return (n[:, None] * [1.0, 1.0], n[:, None] * [1.0, 1.0, 1.0]), n, n + 100


def test_each_worker_gets_its_part_of_every_input_label_and_weight():
    """Worker 1 of 2 gets the second half of each global batch, in every tensor."""
    import tensorflow as tf

    def part(worker):
        ctx = tf.distribute.InputContext(2, worker, 2)
        ds = _TwoInputs({}, None).train_dataset(TrainInput(ctx, 8, 3, 0, 4))
        return list(ds.as_numpy_iterator())

    first, second = part(0), part(1)
    assert len(first) == len(second) == 4
    for a, b in zip(first, second, strict=True):
        (a1, a2), ay, aw = a
        (b1, b2), by, bw = b
        assert a1.shape == (4, 2) and a2.shape == (4, 3) and ay.shape == aw.shape == (4,)
        # Every tensor of a worker's part is cut from the same examples.
        for (x1, x2), y, w in ((a1, a2), ay, aw), ((b1, b2), by, bw):
            assert (x1[:, 0] == y).all() and (x2[:, 2] == y).all() and (w == y + 100).all()
        assert not set(ay) & set(by)


def test_the_step_loss_is_what_fit_logs():
    import tensorflow as tf

    assert float(fit_step.step_loss({"loss": tf.constant(3.0), "acc": 0.5}, 2)) == 1.5
    gan = {"d_loss": tf.constant(1.0), "g_loss": tf.constant(2.0)}  # an own step's, summed
    assert float(fit_step.step_loss(gan, 1)) == 3.0
    with pytest.raises(ConfigError, match=r"a 'loss' \(or '..._loss'\) entry, got \{'acc'\}"):
        fit_step.step_loss({"acc": tf.constant(1.0)}, 1)
    with pytest.raises(ConfigError, match=r"'loss' of float32 shape \[2\]"):
        fit_step.step_loss({"loss": tf.constant([1.0, 2.0])}, 1)


def _model(optimizer="sgd"):
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=optimizer, loss="mse")
    return model


def test_the_compiled_optimizer_trains_unless_the_flags_name_one():
    import keras
    import tensorflow as tf

    spec = (tf.TensorSpec([4, 3]), tf.TensorSpec([4, 2]))
    kept, found = fit_step.prepare(_model("sgd"), spec, config.TrainConfig())
    assert isinstance(kept, keras.optimizers.SGD) and kept.built
    assert found == {"optimizer": kept}
    named, _ = fit_step.prepare(_model("sgd"), spec, config.TrainConfig(optimizer="rmsprop"))
    assert isinstance(named, keras.optimizers.RMSprop)
    with pytest.raises(ConfigError, match="clipnorm or global_clipnorm on the optimizer"):
        fit_step.prepare(_model(), spec, config.TrainConfig(clip_norm=1.0))


def test_an_unbuilt_model_is_built_from_the_first_batchs_spec():
    import keras
    import tensorflow as tf

    class Sub(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2)

        def call(self, x):
            return self.dense(x)

    model = Sub()
    model.compile(optimizer="adam", loss="mse")
    assert not model.weights
    fit_step.prepare(model, (tf.TensorSpec([4, 3]), tf.TensorSpec([4, 2])), config.TrainConfig())
    assert [tuple(v.shape) for v in model.trainable_weights] == [(3, 2), (2,)]
    assert model.optimizer.built


class _NoConfig:
    """A subclassed model taking another model (keras-io's VAE, distiller): no get_config()."""

    @staticmethod
    def make(with_call: bool):
        import keras

        class Wrapper(keras.Model):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

        if with_call:
            Wrapper.call = lambda self, x: self.inner(x)
        model = Wrapper(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]))
        if with_call:
            model(np.zeros((1, 3)))  # built, as training builds it
        return model


@pytest.mark.parametrize(
    ("model", "written", "missing"),
    [
        (lambda: _model(), ["model.keras", "saved_model/"], []),
        (lambda: _NoConfig.make(True), ["model.weights.h5", "saved_model/"], ["model.keras"]),
        (lambda: _NoConfig.make(False), ["model.weights.h5"], ["model.keras", "saved_model/"]),
    ],
    ids=["serialisable", "no-get-config", "no-call"],
)
def test_export_writes_what_keras_can_and_says_why_not_the_rest(tmp_path, model, written, missing):
    result = export.write(model(), str(tmp_path))
    assert result["written"] == written and list(result["not_written"]) == missing
    # Nothing half-written: exactly the files it names, and no temp files.
    present = sorted(p.name + ("/" if p.is_dir() else "") for p in tmp_path.iterdir())
    assert present == sorted(written)
    line = export.line(result)
    assert line.startswith(f"wrote {', '.join(written)}") and "\n" not in line
    if "model.keras" in missing:
        assert "NotImplementedError" in result["not_written"]["model.keras"]
        assert "get_config" in result["not_written"]["model.keras"]
    if "saved_model/" in missing:
        assert result["not_written"]["saved_model/"].endswith("no call() to serve")
