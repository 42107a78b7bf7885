"""A dataset of in-memory slices read by index (issue 55): resume reads nothing before its
step, each worker maps only its share, the same global batches on any number of workers.

The engine's dataset path (``spottrain.trainer.fit_dataset.dataset_dataset``) on
``from_tensor_slices`` datasets made here; what a worker maps is counted by the map
itself (a ``numpy_function`` counter), not timed.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import tensorflow as tf

from spottrain.trainer import fit_dataset, fit_slices, fit_sources
from spottrain.trainer.task_api import TrainInput

N, GLOBAL, SPE = 100, 8, 12  # 100 examples, batches of 8, 12 steps an epoch (4 dropped)
IDS = np.arange(N, dtype=np.int64)


def _double(i):
    return i * 2


def _examples(counter=None, shuffle=True):
    ds = tf.data.Dataset.from_tensor_slices(IDS)
    if shuffle:
        ds = ds.shuffle(16)  # reshuffles each pass: the engine's permutation replaces it
    if counter is not None:

        def count(i):
            counter.append(int(i))
            return i

        ds = ds.map(lambda i: tf.numpy_function(count, [i], tf.int64, stateful=False))
    ds = ds.map(lambda i: (tf.cast(_double(i), tf.float32)[None], i % 3), num_parallel_calls=2)
    return ds.batch(5).prefetch(2).unbatch()  # a user's batch, undone by the engine


def _batches(start, total, workers=1, worker=0, examples=None, shuffle=True):
    context = tf.distribute.InputContext(workers, worker, workers)
    spec = TrainInput(context, GLOBAL, 5, start, total)
    w = fit_sources.Window(spec, SPE, 0, shuffle)
    ds = fit_dataset.dataset_dataset(examples or _examples(), fit_sources.Source("dataset"), w, 64)
    return [(x.numpy()[:, 0] / 2).astype(int).tolist() for x, _ in ds]


def test_the_batch_of_step_s_is_the_permutation_of_its_epoch():
    whole = _batches(0, 3 * SPE)
    for e in range(3):
        order = tf.random.experimental.index_shuffle(
            tf.range(N, dtype=tf.int64), tf.constant([5, e], tf.int64), N - 1
        ).numpy()
        expected = order[: SPE * GLOBAL].reshape(SPE, GLOBAL).tolist()
        assert whole[e * SPE : (e + 1) * SPE] == expected, e
    assert whole[:SPE] != whole[SPE : 2 * SPE]
    # unshuffled (FitArgs(shuffle=False), no shuffle in the chain): the pass's order
    plain = _batches(SPE, SPE + 2, examples=_examples(shuffle=False), shuffle=False)
    assert plain == [list(range(0, 8)), list(range(8, 16))]


def test_a_resume_at_step_100_000_reads_nothing_before_it(caplog):
    start = 100_000
    whole = _batches(start - 30, start + 3)
    mapped: list[int] = []
    with caplog.at_level(logging.INFO, logger="trainer"):
        resumed = _batches(start, start + 3, examples=_examples(mapped))
    assert resumed == whole[30:]
    # the map ran on the 3 batches read, and on nothing before them
    assert sorted(mapped) == sorted(sum(resumed, [])), mapped
    assert any("reads no batch before it" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_each_worker_maps_only_its_share_of_the_same_global_batches(workers):
    whole = _batches(2 * SPE + 3, 3 * SPE + 4)
    shares, mapped = [], []
    for w in range(workers):
        mine: list[int] = []
        shares.append(_batches(2 * SPE + 3, 3 * SPE + 4, workers, w, _examples(mine)))
        mapped.append(mine)
    assert [sum(parts, []) for parts in zip(*shares, strict=True)] == whole
    for w in range(workers):  # worker w mapped its own examples, each once
        assert sorted(mapped[w]) == sorted(sum(shares[w], [])), w


def _drawn(i):
    return i + tf.cast(tf.random.uniform([], 0, 3, tf.int32), tf.int64)


def _slices(i):
    return tf.data.Dataset.from_tensor_slices(IDS)


@pytest.mark.parametrize(
    "make, indexed",
    [
        (lambda: _slices(0).cache().map(_double).prefetch(1), True),
        (lambda: _slices(0).map(_double).cache().prefetch(1), False),  # mapped once, kept
        (lambda: _slices(0).shuffle(8).batch(4).unbatch(), True),
        (lambda: tf.data.Dataset.from_tensor_slices({"a": IDS, "b": IDS}), True),
        (lambda: _slices(0).batch(4).map(lambda b: b * 2).unbatch(), False),  # batch-level
        (lambda: _slices(0).filter(lambda i: i > 3), False),
        (lambda: _slices(0).enumerate(), False),
        (lambda: tf.data.Dataset.range(N), False),
        (lambda: _slices(0).take(50), False),
        (lambda: _slices(0).padded_batch(4).unbatch(), False),
        (lambda: tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1], [2, 3]])), False),
    ],
)
def test_which_datasets_are_read_by_index(make, indexed):
    assert (fit_slices.slices(make()) is not None) is indexed


def test_a_cache_after_a_map_is_kept_each_example_mapped_once():
    """``map(decode).cache()``: the user maps each example once and keeps it; read as a
    stream, not by index (whose maps would run again every epoch): over 3 epochs, the
    first epoch's 96 examples (the process's first epoch is read around the cache:
    test_fit_dataset.py), then the 100 once into the cache, then none."""
    mapped = []

    def count(i):
        mapped.append(int(i))
        return i

    examples = tf.data.Dataset.from_tensor_slices(IDS)
    examples = examples.map(lambda i: tf.numpy_function(count, [i], tf.int64, stateful=False))
    examples = examples.cache().map(lambda i: (tf.cast(_double(i), tf.float32)[None], i % 3))
    assert fit_slices.slices(examples) is None
    got = _batches(0, 3 * SPE, examples=examples)
    assert len(got) == 3 * SPE and len(mapped) == SPE * GLOBAL + N
    assert sorted(mapped[SPE * GLOBAL :]) == IDS.tolist()


def test_a_map_that_draws_from_a_stateful_op_is_read_as_a_stream(caplog):
    examples = tf.data.Dataset.from_tensor_slices(IDS).map(_drawn)
    examples = examples.map(lambda i: (tf.cast(i, tf.float32)[None], i % 3))
    with caplog.at_level(logging.WARNING, logger="trainer"):
        assert len(_batches(30, 32, examples=examples)) == 2
    (line,) = [r.getMessage() for r in caplog.records if "resume at step 30" in r.getMessage()]
    assert "reads all 30 batches before it" in line and "RandomUniform" in line, line


def test_an_epoch_longer_than_the_slices_is_read_as_a_stream():
    """steps_per_epoch x global batch beyond the examples: no index past the end."""
    context = tf.distribute.InputContext(1, 0, 1)
    spec = TrainInput(context, GLOBAL, 5, 0, 2)
    w = fit_sources.Window(spec, N // GLOBAL + 1, 0, True)
    ds = fit_dataset.dataset_dataset(_examples(), fit_sources.Source("dataset"), w, 64)
    assert len(list(ds)) == 2


def test_slices_batched_by_the_user_keep_their_count():
    """A dataset of batches has no count once unbatched (a short last batch), unless it
    is slices: then ``epochs`` needs no ``steps_per_epoch``."""
    from spottrain import FitArgs

    batched = tf.data.Dataset.from_tensor_slices(IDS).map(_double).batch(7)
    assert fit_sources.classify(FitArgs(batched), "T.fit()", None).examples == N
    opaque = tf.data.Dataset.range(N).batch(7)
    assert fit_sources.classify(FitArgs(opaque), "T.fit()", None).examples is None
