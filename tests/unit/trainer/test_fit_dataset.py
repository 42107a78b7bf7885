"""A tf.data dataset's epochs: exact resume reading at most one epoch (issue 55).

The engine's dataset path (``spottrain.trainer.fit_dataset``) on datasets made here;
what a resume reads is counted by the dataset itself (a ``py_function`` counter), not
timed.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from spottrain.trainer import fit_dataset, fit_sources
from spottrain.trainer.task_api import TrainInput

N, GLOBAL, SPE = 100, 8, 12  # 100 examples, batches of 8, 12 steps an epoch


def _examples(read=None):
    ds = tf.data.Dataset.range(N)
    if read is not None:

        def count(i):
            read.append(1)
            return i

        ds = ds.map(lambda i: tf.py_function(count, [i], tf.int64))
    return ds.map(lambda i: (tf.cast(i, tf.float32)[None], i % 3))


def _batches(start, total, workers=1, worker=0, read=None, examples=None, shuffle=True):
    context = tf.distribute.InputContext(workers, worker, workers)
    spec = TrainInput(context, GLOBAL, 5, start, total)
    w = fit_sources.Window(spec, SPE, 0, shuffle)
    source = fit_sources.Source("dataset")
    ds = fit_dataset.dataset_dataset(examples or _examples(read), source, w, 64)
    return [x.numpy()[:, 0].astype(int).tolist() for x, _ in ds]


def test_a_resume_reads_the_batches_an_uninterrupted_run_reads():
    whole = _batches(0, 40)
    for start in (1, SPE - 1, SPE, 2 * SPE + 5, 39):
        assert _batches(start, 40) == whole[start:], start
    # every epoch its own order, and each epoch a permutation's batches (no repeats)
    epochs = [sum(whole[e * SPE : (e + 1) * SPE], []) for e in range(3)]
    assert all(len(set(e)) == SPE * GLOBAL for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]


@pytest.mark.parametrize("workers", [2, 4])
def test_workers_read_their_share_of_the_same_global_batches(workers):
    """A gang of any size resumes the same run: its shares make the same global batches."""
    whole = _batches(2 * SPE + 3, 3 * SPE + 4)
    shares = [_batches(2 * SPE + 3, 3 * SPE + 4, workers, w) for w in range(workers)]
    assert [sum(parts, []) for parts in zip(*shares, strict=True)] == whole


def _records(read):
    """What the maps read, counted: ``Dataset.range``'s elements, before any map."""

    def count(i):
        read.append(1)
        return i

    return tf.data.Dataset.range(N).map(lambda i: tf.py_function(count, [i], tf.int64))


def test_a_resume_at_step_100_000_reads_at_most_one_epoch():
    read: list[int] = []
    start = 100_000
    examples = _records(read).map(lambda i: (tf.cast(i, tf.float32)[None], i % 3))
    assert len(_batches(start, start + 2, examples=examples)) == 2
    # the epoch's records before the step and the two batches read, each of 8 (a
    # prefetch may read a few more of the epoch, never of the epochs before)
    assert len(read) <= (start % SPE + 2) * GLOBAL + 2 * 64, len(read)
    assert len(read) <= SPE * GLOBAL + 64


@pytest.mark.parametrize("workers", [1, 4])
def test_each_worker_maps_only_its_share_and_nothing_before_a_resume(workers):
    """The order is made on what the maps read; each worker maps its share of the batches
    it reads: a resume at step 100,000 skips the epoch's batches before it unmapped."""
    start, share = 100_000, GLOBAL // workers
    mapped: list[int] = []
    assert len(_batches(start, start + 3, workers, 0, read=mapped)) == 3
    assert len(mapped) == 3 * share, len(mapped)


def _cached(read):
    """``map(decode).cache()``: what is mapped below the cache counted."""
    return _records(read).cache().map(lambda i: (tf.cast(i, tf.float32)[None], i % 3))


def test_a_cache_after_a_map_resumes_exactly_skipping_its_epoch_unmapped():
    """A process's first epoch is read around the cache (its records before the step
    skipped unmapped, each worker mapping its share), the next epochs through it (each
    record mapped once), from step 0 as from a resume."""
    whole = _batches(0, 40)
    for start in (1, SPE - 1, SPE, 2 * SPE + 5, 39):
        assert _batches(start, 40, examples=_cached([])) == whole[start:], start
    for workers in (1, 4):
        mapped: list[int] = []
        start, share = 100_000, GLOBAL // workers  # 4 steps into its epoch
        assert len(_batches(start, start + 3, workers, 0, examples=_cached(mapped))) == 3
        assert len(mapped) == 3 * share, (workers, len(mapped))
    for start, left in ((100_000, 8), (0, SPE)):  # the rest of its epoch on its share,
        mapped = []  # then every record once, kept in the cache
        got = _batches(start, start + left + 3 * SPE, 4, 0, examples=_cached(mapped))
        assert len(got) == left + 3 * SPE and len(mapped) == left * (GLOBAL // 4) + N, start


def _drawn():
    return tf.cast(tf.random.uniform([]) > 2, tf.int64)  # 0, from a stateful op


@pytest.mark.parametrize(
    "make, named",
    [
        (lambda: tf.data.Dataset.range(N).shuffle(10, seed=1), "reshuffles each pass"),
        (lambda: tf.data.Dataset.range(N).map(lambda i: i + _drawn()), "RandomUniform"),
        (lambda: tf.data.Dataset.random(seed=3).take(N), "RandomDataset"),
        # inside a function: a flat_map's inner dataset reshuffles each pass
        (lambda: tf.data.Dataset.range(1).flat_map(lambda _: tf.data.Dataset.range(N).shuffle(9)),
         "reshuffles each pass"),
    ],
)  # fmt: skip
def test_a_dataset_whose_passes_differ_is_read_from_the_start_and_says_why(make, named, caplog):
    problem = fit_dataset.replay_problem(make())
    assert problem and named in problem, problem
    examples = make().map(lambda i: (tf.cast(i % 1000, tf.float32)[None], i % 3))
    with caplog.at_level("WARNING", logger="trainer"):
        resumed = _batches(30, 34, examples=examples)
    assert len(resumed) == 4
    (line,) = [r.getMessage() for r in caplog.records if "resume at step 30" in r.getMessage()]
    assert "reads all 30 batches before it from the start" in line and named in line, line


def test_datasets_whose_passes_agree_are_replayable():
    same = [
        tf.data.Dataset.range(N),
        tf.data.Dataset.from_tensor_slices(np.arange(N)).map(lambda i: i * 2).batch(4).unbatch(),
        tf.data.Dataset.range(N).shuffle(10, seed=1, reshuffle_each_iteration=False),
        tf.data.Dataset.range(N).map(
            lambda i: tf.random.stateless_uniform([], seed=tf.stack([i, i])) + 1.0
        ),
    ]
    assert [fit_dataset.replay_problem(ds) for ds in same] == [None] * len(same)


def test_seed_0_and_a_global_seed_of_0_build_and_resume(monkeypatch):
    """tf.data's get_seed compares (global, op) == (0, 0): a tensor op seed raised there."""
    tf.random.set_seed(0)
    try:
        whole = _batches(0, 30)
        assert _batches(SPE + 2, 30) == whole[SPE + 2 :]
    finally:
        tf.random.set_seed(None)
