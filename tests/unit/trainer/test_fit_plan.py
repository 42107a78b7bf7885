"""The inputs model.fit takes, from a KerasTask's fit() (issue 54): spottrain/trainer/fit_plan.py.

In-process, real TensorFlow and Keras; the 2-worker SIGTERM runs are in
tests/integration/trainer/test_fit_inputs.py.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from spottrain.exits import ConfigError
from spottrain.trainer import config, fit_plan, run_length
from spottrain.trainer.fit_args import FitArgs
from spottrain.trainer.task_api import KerasTask, Task, TrainInput

N = 100  # examples: with a global batch of 8, 12 steps an epoch and 4 dropped


def _arrays(n=N):
    x = np.arange(n, dtype="float32")[:, None] * [1.0, 1.0]
    return x.astype("float32"), np.arange(n) % 3


class Fit(KerasTask):
    """A task whose fit() is given per test (``Fit.with_(...)``)."""

    given: FitArgs = FitArgs()

    @classmethod
    def with_(cls, **kw):
        return type("T", (cls,), {"given": FitArgs(**kw)})({}, None)

    def fit(self):
        return self.given


def _cfg(**kw):
    return config.TrainConfig(**{"batch_size_per_replica": 4, **kw})


def _read(task, global_batch=8, start=0, total=12, seed=7, workers=1, worker=0):
    import tensorflow as tf

    context = tf.distribute.InputContext(workers, worker, workers)
    spec = TrainInput(context, global_batch, seed, start, total)
    return list(task.train_dataset(spec).as_numpy_iterator())


# -- the global batch ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "flags", "replicas", "batch"),
    [
        ({}, {}, 2, 8),  # --batch-size-per-replica 4 x 2
        ({"batch_size": 12}, {}, 2, 12),  # fit's batch_size is the global batch
        ({"batch_size": 12}, {"global_batch_size": 16}, 2, 16),  # the flag wins
    ],
    ids=["flags", "fit", "global-flag-wins"],
)
def test_the_global_batch_follows_its_precedence(kw, flags, replicas, batch):
    task = Fit.with_(x=_arrays()[0], y=_arrays()[1], **kw)
    assert fit_plan.resolve(task, _cfg(**flags), replicas).global_batch == batch


def test_a_batch_size_the_replicas_cannot_split_is_one_line():
    task = Fit.with_(x=_arrays()[0], y=_arrays()[1], batch_size=10)
    with pytest.raises(ConfigError) as e:
        fit_plan.resolve(task, _cfg(), 4)
    assert str(e.value).startswith("T.fit()'s batch_size=10 is not divisible by the 4 replicas")
    assert "\n" not in str(e.value)


# -- the length: epochs, steps_per_epoch, initial_epoch ----------------------------------------


@pytest.mark.parametrize(
    ("kw", "flags", "spe", "total", "first"),
    [
        ({}, {}, 12, 12, 0),  # epochs=1; 100 // 8, the remainder dropped
        ({"epochs": 3}, {}, 12, 36, 0),
        ({"epochs": 3, "steps_per_epoch": 5}, {}, 5, 15, 0),
        ({"epochs": 5, "initial_epoch": 2}, {}, 12, 36, 24),  # epochs 2, 3, 4
        ({"epochs": 3}, {"epochs": 6.0}, 12, 72, 0),  # --epochs over fit's epochs
        ({"epochs": 3}, {"train_steps": 7}, 12, 7, 0),  # --train-steps over both
    ],
    ids=["default", "epochs", "steps_per_epoch", "initial_epoch", "--epochs", "--train-steps"],
)
def test_the_run_length_is_epochs_times_steps_per_epoch(kw, flags, spe, total, first):
    plan = fit_plan.resolve(Fit.with_(x=_arrays()[0], y=_arrays()[1], **kw), _cfg(**flags), 2)
    assert (plan.steps_per_epoch, plan.total_steps, plan.first_position) == (spe, total, first)
    assert plan.epoch_of(1) == first // spe and plan.ends_epoch(spe - first % spe)


def test_arrays_with_epochs_flag_train_where_the_engine_refused_them():
    """Before issue 54: "--epochs needs a task that knows its number of examples"."""

    class Arrays(KerasTask):
        def examples(self):
            return _arrays()

    global_batch, total, plan = run_length.of(Arrays({}, None), _cfg(epochs=6.0), 2)
    assert (global_batch, total, plan.examples) == (8, 72, N)


def test_data_of_no_length_is_one_line_with_epochs_and_fine_with_train_steps():
    import tensorflow as tf

    def stream():
        return tf.data.Dataset.from_tensor_slices(_arrays()).repeat().map(lambda x, y: (x, y))

    for flags, said in (({"epochs": 6.0}, "--epochs 6"), ({}, "epochs=1")):
        with pytest.raises(ConfigError) as e:
            fit_plan.resolve(Fit.with_(x=stream()), _cfg(**flags), 2)
        assert str(e.value).startswith(f"{said}: T.fit()'s dataset has no length")
        assert "\n" not in str(e.value)
    assert fit_plan.resolve(Fit.with_(x=stream()), _cfg(train_steps=9), 2).total_steps == 9
    # --check without a length probes 100 steps instead of stopping.
    assert fit_plan.resolve(Fit.with_(x=stream()), _cfg(), 1, need_length=False).total_steps == 100


def test_a_plain_task_keeps_the_flags_path():
    class Plain(Task):
        def num_train_examples(self):
            return 100

    assert run_length.of(Plain({}, None), _cfg(train_steps=5), 2) == (8, 5, None)
    assert run_length.of(Plain({}, None), _cfg(epochs=2.0), 2) == (8, 25, None)
    with pytest.raises(ConfigError, match=r"give --train-steps \(0\) or --epochs \(0\)"):
        run_length.of(Plain({}, None), _cfg(), 2)


def test_the_flags_may_leave_the_length_to_fit_but_not_give_both():
    config.validate(_cfg(task="m:T", checkpoint_dir="/c", model_dir="/m"))
    with pytest.raises(ConfigError, match="give at most one of --train-steps"):
        config.validate(_cfg(train_steps=5, epochs=2.0, checkpoint_dir="/c", model_dir="/m"))


# -- arrays: index arithmetic -----------------------------------------------------------------


def _labels_by_step(task, **kw):
    return [tuple(int(v) for v in b[0][:, 0]) for b in _read(task, **kw)]


def test_each_epoch_of_arrays_is_a_seeded_permutation_cut_at_its_steps():
    task = Fit.with_(x=_arrays()[0], y=_arrays()[1], epochs=2)
    plan = fit_plan.resolve(task, _cfg(), 2)
    steps = _labels_by_step(task, total=plan.total_steps)
    assert len(steps) == 24
    epochs = [sum(steps[e * 12 : (e + 1) * 12], ()) for e in (0, 1)]
    for examples in epochs:  # 96 distinct examples an epoch, 4 dropped
        assert len(set(examples)) == 96 and set(examples) <= set(range(N))
    assert epochs[0] != epochs[1]  # reshuffled each epoch
    assert _labels_by_step(task, total=plan.total_steps, seed=8) != steps  # the run's seed


def test_a_resume_reads_the_same_batches_from_its_step_on():
    task = Fit.with_(x=_arrays()[0], y=_arrays()[1], epochs=3)
    whole = _labels_by_step(task, total=36)
    assert _labels_by_step(task, start=17, total=36) == whole[17:]


def test_shuffle_false_is_the_arrays_order_every_epoch():
    task = Fit.with_(x=_arrays()[0], y=_arrays()[1], epochs=2, shuffle=False)
    steps = _labels_by_step(task, total=24)
    assert steps[0] == tuple(range(8)) and steps[12] == tuple(range(8))


def test_each_worker_reads_its_part_of_each_global_batch():
    task = Fit.with_(x=_arrays()[0], y=_arrays()[1])
    whole = _labels_by_step(task)
    halves = [_labels_by_step(task, workers=2, worker=w) for w in (0, 1)]
    assert [a + b for a, b in zip(*halves, strict=True)] == whole


def test_initial_epoch_starts_at_its_epochs_batches():
    from_zero = Fit.with_(x=_arrays()[0], y=_arrays()[1], epochs=3)
    from_two = Fit.with_(x=_arrays()[0], y=_arrays()[1], epochs=3, initial_epoch=2)
    fit_plan.resolve(from_two, _cfg(), 2)
    assert _labels_by_step(from_two, total=12) == _labels_by_step(from_zero, total=36)[24:]


def test_class_weight_gives_fits_sample_weights():
    from keras.src.trainers.data_adapters import data_adapter_utils

    x, y = _arrays()
    weights = {0: 0.5, 1: 2.0}
    batches = _read(Fit.with_(x=x, y=y, class_weight=weights, shuffle=False))
    got = np.concatenate([b[2] for b in batches])
    want = data_adapter_utils.class_weight_to_sample_weights(y, weights)[:96]
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ConfigError, match="class_weight with sample_weight"):
        fit_plan.resolve(Fit.with_(x=x, y=y, sample_weight=y * 1.0, class_weight=weights), None, 1)


def test_validation_split_holds_out_the_last_fraction_before_shuffling():
    x, y = _arrays()
    task = Fit.with_(x=x, y=y, validation_split=0.2)
    plan = fit_plan.resolve(task, _cfg(), 2)
    held_x, held_y = plan.validation_data
    np.testing.assert_array_equal(held_x, x[80:])
    np.testing.assert_array_equal(held_y, y[80:])
    assert (plan.examples, plan.steps_per_epoch) == (80, 10)
    assert max(max(s) for s in _labels_by_step(task, total=10)) < 80
    given = (x[:5], y[:5])
    task = Fit.with_(x=x, y=y, validation_split=0.2, validation_data=given)
    kept = fit_plan.resolve(task, None, 1)
    assert kept.validation_data is given  # fit's validation_data wins over the split


def test_fits_other_arguments_pass_through_for_validation_and_callbacks():
    callbacks = [keras.callbacks.History()]
    task = Fit.with_(
        x=_arrays()[0],
        callbacks=callbacks,
        validation_steps=3,
        validation_batch_size=16,
        validation_freq=2,
    )
    plan = fit_plan.resolve(task, _cfg(), 2)
    assert plan.callbacks is callbacks
    assert (plan.validation_steps, plan.validation_batch_size, plan.validation_freq) == (3, 16, 2)


# -- PyDataset and generators --------------------------------------------------------------------


class Batches(keras.utils.PyDataset):
    """Batch i is examples [8i, 8i+8); it counts the batches read."""

    def __init__(self, count=10, size=8):
        super().__init__()
        self.count, self.size, self.read = count, size, []

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        self.read.append(i)
        x = np.arange(i * self.size, (i + 1) * self.size, dtype="float32")[:, None]
        return x, x[:, 0] * 2


def test_a_pydataset_is_read_by_index_each_epoch_a_seeded_permutation():
    ds = Batches()
    task = Fit.with_(x=ds, epochs=3)
    plan = fit_plan.resolve(task, _cfg(), 2)
    assert (plan.global_batch, plan.steps_per_epoch, plan.total_steps) == (8, 10, 30)
    firsts = [int(b[0][0, 0]) // 8 for b in _read(task, total=30)]
    for e in range(3):
        assert sorted(firsts[e * 10 : (e + 1) * 10]) == list(range(10))
    assert firsts[:10] != firsts[10:20]
    ds.read.clear()
    resumed = [int(b[0][0, 0]) // 8 for b in _read(task, start=23, total=30)]
    assert resumed == firsts[23:] and ds.read == resumed  # only the batches from step 23 on


def test_a_pydatasets_short_last_batch_is_dropped_and_batch_size_ignored_as_by_fit(caplog):
    class Short(Batches):
        def __getitem__(self, i):
            x, y = super().__getitem__(i)
            return (x[:3], y[:3]) if i == self.count - 1 else (x, y)

    assert fit_plan.resolve(Fit.with_(x=Short()), _cfg(), 2).steps_per_epoch == 9
    # model.fit takes batch_size with a PyDataset and does not use it: so do we, saying so.
    caplog.set_level("INFO")
    plan = fit_plan.resolve(Fit.with_(x=Batches(), batch_size=8), _cfg(), 2)
    assert plan.global_batch == fit_plan.resolve(Fit.with_(x=Batches()), _cfg(), 2).global_batch
    assert any(
        "batch_size=8 is not used with x a PyDataset" in r.getMessage() for r in caplog.records
    )
    with pytest.raises(ConfigError, match="--global-batch-size 16: the task's PyDataset gives"):
        fit_plan.resolve(Fit.with_(x=Batches()), _cfg(global_batch_size=16), 2)


def _gen(n=40):
    for i in range(n):
        x = np.arange(i * 4, (i + 1) * 4, dtype="float32")[:, None]
        yield x, x[:, 0]


def test_a_generator_is_read_through_to_the_resumed_step(caplog):
    class Gen(KerasTask):
        def fit(self):
            return FitArgs(_gen(), steps_per_epoch=10, epochs=2)

    task = Gen({}, None)
    plan = fit_plan.resolve(task, _cfg(), 2)
    assert (plan.global_batch, plan.total_steps) == (4, 20)
    whole = [int(b[0][0, 0]) for b in _read(task, global_batch=4, total=20)]
    assert whole == list(range(0, 80, 4))
    with caplog.at_level("WARNING", logger="trainer"):
        resumed = [int(b[0][0, 0]) for b in _read(task, global_batch=4, start=13, total=20)]
    assert resumed == whole[13:]
    said = [r.getMessage() for r in caplog.records if "resume at step 13" in r.getMessage()]
    assert said and "reads all 13 batches before it from the generator's start" in said[0], said
    fn = Fit.with_(x=_gen, steps_per_epoch=10)  # a generator function: called anew
    assert len(_read(fn, global_batch=4, total=10)) == len(_read(fn, global_batch=4, total=10))


def test_one_generator_object_given_twice_is_one_line():
    """fit() must make it anew: the engine read its first batch to learn its batch size."""
    task = Fit.with_(x=_gen(), steps_per_epoch=5)
    fit_plan.resolve(task, _cfg(), 1)
    with pytest.raises(ConfigError, match="gave the same generator object twice"):
        _read(task, global_batch=4, total=5)


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"x": _arrays()[0], "y": _arrays()[1][:50]}, "arrays of one length, not [50, 100]"),
        ({"x": None}, "gives x=None"),
        ({"x": Batches(), "y": np.zeros(8)}, "y= with x a PyDataset"),
        ({"x": _arrays()[0], "steps_per_epoch": 20}, "steps_per_epoch=20 is more than the 12"),
        ({"x": _arrays()[0], "validation_split": 1.5}, "validation_split=1.5 must be in (0, 1)"),
        ({"x": _arrays()[0], "epochs": 2, "initial_epoch": 2}, "epochs=2 must be more than"),
    ],
    ids=["unequal", "none", "y-with-pydataset", "spe", "split", "initial_epoch"],
)
def test_what_fit_would_refuse_is_one_line_naming_the_value(kw, said):
    with pytest.raises(ConfigError) as e:
        fit_plan.resolve(Fit.with_(**kw), _cfg(), 2)
    assert said in str(e.value) and "\n" not in str(e.value)


def test_sample_weight_and_dicts_come_as_fit_packs_them():
    x, y = _arrays()
    batches = _read(Fit.with_(x={"a": x}, y=y, sample_weight=y + 100.0, shuffle=False))
    features, labels, weights = batches[0]
    np.testing.assert_array_equal(features["a"], x[:8])
    np.testing.assert_array_equal(weights, labels + 100.0)
