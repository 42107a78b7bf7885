"""What a resume and a wider gang cost a KerasTask's input (issues 54 and 55).

Five kinds of data ``model.fit`` takes, each through the engine's pipeline for it
(``KerasTask.train_dataset``, spottrain/trainer/fit_sources.py and fit_dataset.py),
global batch 256, 60,000 examples of 32x32x3 uint8 (CIFAR's shape) and a light
augmentation (a stateless flip) where the data is a dataset:

- ``arrays``: ``FitArgs(x, y)``: a batch is gathered by index.
- ``dataset``: ``tf.data.Dataset.from_tensor_slices((x, y)).map(flip)``: read by index
  (spottrain/trainer/fit_slices.py).
- ``tfrecord``: the same examples written as TFRecord files (8 shards), parsed and
  flipped: a stream, epoch by epoch (spottrain/trainer/fit_dataset.py).
- ``tfds``: the same examples as a tfds dataset (``CifarShapedBench``: PNG images and
  a ``ClassLabel``), prepared into a data_dir first (about 10 s; 2 files of 97 MB),
  ``tfds.load(..., as_supervised=True).map(flip)``: a stream; tfds decodes the PNGs,
  and caches the split in memory (it is under tfds' 250 MiB).
- ``pydataset``: a ``keras.utils.PyDataset`` of 234 batches of 256.

**Resume**: the time from making the pipeline at ``start_step = s`` to its first batch
(worker 0 of 2), for s = 0, 10,000 and 100,000. Before issue 55, a dataset was read
through every batch before ``s``; before issue 54 arrays were too. Run with
``PYTHONPATH`` at an older checkout to see that side.

**Width**: the input time per step of worker 0 of 1, 2, 4 and 8 workers (its share of
the same global batch of 256), over 60 steps after 5 warm-up steps, beside the same
share read alone (a pipeline of the share's size, one worker), and beside **fit**: the
same worker's input per step in the pipeline ``model.fit`` itself runs under
``MultiWorkerMirroredStrategy`` (one replica a worker): Keras's own data adapter's
dataset (the user's dataset batched by 256), rebatched and auto-sharded for worker 0
by TensorFlow's own ``experimental_distribute_dataset`` code (see ``_fit_view``).
Its line names the policy: arrays' is DATA (Keras sets it: every worker gathers the
whole batch and keeps its part); a dataset's is AUTO, which shards the files (FILE)
where it finds a reader, else the batches (DATA, as for a PyDataset's generator).
With fewer files than workers (tfds: 2 files, 4 workers) fit fails on its first
batch; the line says so and gives the figure with DATA set, as TF's error advises.

**Quality** (``--quality``): the dataset path's order (windows of 256 permuted by
``(seed, epoch)``, then the task's 10,000 buffer with the run's seed) beside
``Dataset.shuffle(10000)``, on 60,000 examples sorted by class.

Usage: ``python bench/fit_resume_cost.py [--steps 0 10000 100000] [--workers 1 2 4 8]
[--kinds arrays dataset tfrecord tfds pydataset] [--quality]``
"""

from __future__ import annotations

import argparse
import glob
import os
import tempfile
import time
import types

import keras
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from spottrain import FitArgs, KerasTask
from spottrain.trainer.task_api import TrainInput

N, BATCH = 60_000, 256
_rng = np.random.default_rng(0)
X = _rng.integers(0, 255, (N, 32, 32, 3), dtype=np.uint8)
Y = (np.arange(N) % 10).astype(np.int64)


def _flip(x, y):
    x = tf.cast(x, tf.float32) / 255.0
    seed = tf.stack([tf.cast(y, tf.int64), tf.constant(7, tf.int64)])
    return tf.image.stateless_random_flip_left_right(x, seed), y


class _Small(KerasTask):
    """A small CNN (bench/restart_cost.py trains these: its restart, not its quality)."""

    def model(self):
        model = keras.Sequential(
            [
                keras.Input((32, 32, 3)),
                keras.layers.Rescaling(1.0),
                keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(10),
            ]
        )
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer="adam", loss=loss)
        return model


class Arrays(_Small):
    def fit(self):
        return FitArgs(X, Y, batch_size=BATCH, epochs=1000)


class Dataset(_Small):
    def fit(self):
        ds = tf.data.Dataset.from_tensor_slices((X, Y)).map(_flip)
        return FitArgs(ds, batch_size=BATCH, epochs=1000, steps_per_epoch=N // BATCH)


class Records(_Small):
    folder = os.environ.get("BENCH_RECORDS", "")  # bench/restart_cost.py's trainer

    def fit(self):
        files = sorted(tf.io.gfile.glob(os.path.join(self.folder, "*.tfrecord")))
        spec = {"x": tf.io.FixedLenFeature([], tf.string), "y": tf.io.FixedLenFeature([], tf.int64)}

        def parse(record):
            ex = tf.io.parse_single_example(record, spec)
            x = tf.reshape(tf.io.decode_raw(ex["x"], tf.uint8), [32, 32, 3])
            return _flip(x, ex["y"])

        ds = tf.data.TFRecordDataset(files).map(parse)
        return FitArgs(ds, batch_size=BATCH, epochs=1000, steps_per_epoch=N // BATCH)


class CifarShapedBench(tfds.core.GeneratorBasedBuilder):
    """``X``/``Y`` as a tfds dataset: 32x32x3 PNG images (decoded on read) and a label."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        # DatasetInfo itself: dataset_info_from_configs reads README/CITATIONS from the
        # module's package folder, and run as a script this module is __main__ (a file).
        features = {
            "image": tfds.features.Image(shape=(32, 32, 3)),
            "label": tfds.features.ClassLabel(num_classes=10),
        }
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(features),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for i in range(N):
            yield i, {"image": X[i], "label": int(Y[i])}


class Tfds(_Small):
    folder = os.environ.get("BENCH_TFDS", "")  # its data_dir; bench/restart_cost.py's trainer

    def fit(self):
        name, folder = CifarShapedBench.name, self.folder
        ds = tfds.load(name, split="train", data_dir=folder, as_supervised=True)
        return FitArgs(ds.map(_flip), batch_size=BATCH, epochs=1000, steps_per_epoch=N // BATCH)


class Batches(keras.utils.PyDataset):
    def __len__(self):
        return N // BATCH

    def __getitem__(self, i):
        at = slice(i * BATCH, (i + 1) * BATCH)
        return X[at].astype("float32") / 255.0, Y[at]


class PyData(_Small):
    def fit(self):
        return FitArgs(Batches(), epochs=1000)


KINDS = {
    "arrays": Arrays,
    "dataset": Dataset,
    "tfrecord": Records,
    "tfds": Tfds,
    "pydataset": PyData,
}


def _write_records(folder: str) -> None:
    for shard in range(8):
        path = os.path.join(folder, f"train-{shard}.tfrecord")
        with tf.io.TFRecordWriter(path) as w:
            for i in range(shard, N, 8):
                feats = {
                    "x": tf.train.Feature(bytes_list=tf.train.BytesList(value=[X[i].tobytes()])),
                    "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(Y[i])])),
                }
                w.write(
                    tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()
                )


def _prepare_tfds(folder: str) -> None:
    """``CifarShapedBench`` prepared into ``folder`` (its data_dir), PNG-encoding 60,000 images."""
    tfds.disable_progress_bar()
    began = time.monotonic()
    CifarShapedBench(data_dir=folder).download_and_prepare()
    took = time.monotonic() - began
    files = len(_files(folder))
    print(f"tfds: prepared {N} examples, {files} files, in {took:.1f} s", flush=True)


def _files(folder: str) -> list[str]:
    return glob.glob(os.path.join(folder, "**", "*.tfrecord*"), recursive=True)


def _pipeline(kind, workers, worker, start, steps, batch=BATCH):
    task = kind({}, None)
    spec = TrainInput(
        tf.distribute.InputContext(workers, worker, workers), batch, 7, start, start + steps
    )
    return task.train_dataset(spec)


def resume(kind, starts) -> None:
    for start in starts:
        began = time.monotonic()
        next(iter(_pipeline(kind, 2, 0, start, 10)))
        print(
            f"{kind.__name__}: first batch at step {start}: {time.monotonic() - began:.2f} s",
            flush=True,
        )


STEPS, REPEATS = 60, 3  # timed steps a pipeline, interleaved repeats (their median)


def _per_step(ds) -> float:
    it = iter(ds)
    for _ in range(5):
        next(it)
    began = time.perf_counter()
    for _ in range(STEPS):
        next(it)
    return (time.perf_counter() - began) / STEPS


def width(kind, counts) -> None:
    for workers in counts:
        shares, alones = [], []
        for _ in range(REPEATS):  # side by side: the load at the moment weighs on both
            shares.append(_per_step(_pipeline(kind, workers, 0, 500, STEPS + 10)))
            if kind is not PyData:
                alone = _pipeline(kind, 1, 0, 500, STEPS + 10, batch=BATCH // workers)
                alones.append(_per_step(alone))
        share = float(np.median(shares))
        if kind is PyData:  # its batches are 256 whatever is asked: nothing to read alone
            print(f"PyData: worker 0 of {workers}: {1000 * share:.1f} ms/step", flush=True)
        else:
            ratios = sorted(a / b for a, b in zip(shares, alones, strict=True))
            print(
                f"{kind.__name__}: worker 0 of {workers}: {1000 * share:.1f} ms/step; its "
                f"{BATCH // workers} examples alone {1000 * float(np.median(alones)):.1f} ms "
                f"({ratios[len(ratios) // 2]:.2f}x, {ratios[0]:.2f}-{ratios[-1]:.2f}x in "
                f"{REPEATS} repeats)",
                flush=True,
            )
        fit_baseline(kind, workers)


# The baseline: what model.fit reads on worker 0 of N under MultiWorkerMirroredStrategy,
# made by TensorFlow's and Keras's own code (paths under site-packages, TF 2.21, Keras 3.15):
# - keras/src/backend/tensorflow/trainer.py:747-756: fit's TFEpochIterator takes
#   data_adapter.get_tf_dataset() and calls strategy.experimental_distribute_dataset;
#   keras/src/trainers/data_adapters/array_data_adapter.py:239-244: arrays' dataset sets
#   AutoShardPolicy.DATA; a user's tf.data dataset keeps its own (AUTO by default).
# - tensorflow/python/distribute/collective_all_reduce_strategy.py:745-773: MWMS makes
#   InputContext(num_workers, its task id, num_replicas_in_sync) and passes it to
#   input_util.get_distributed_dataset -> input_lib.DistributedDataset (input_util.py:65).
# - tensorflow/python/distribute/input_lib.py:880-910 (_create_cloned_datasets_from_dataset,
#   the input_context branch): with num_replicas_in_sync > 1 (:893) the dataset is first
#   rebatched for this worker (:905; _make_rebatch_fn :924-976: dataset.rebatch(
#   batch_sizes_for_worker(global batch, workers, replicas per worker, worker)), :949-951),
#   then input_ops.auto_shard_dataset(dataset, num_input_pipelines, input_pipeline_id,
#   num_replicas_in_sync) (:906-909).
# - tensorflow/python/distribute/input_ops.py:28-59: auto_shard_dataset wraps it in
#   _AutoShardDataset unless the policy is OFF (:48-57), whose rewrite
#   (tensorflow/python/data/experimental/ops/distribute.py:41-55) shards the files before
#   a reader (FILE), or the elements at the end, the rebatch made the legacy one (DATA);
#   AUTO tries FILE, then DATA if it finds no reader (:51-53). Too few files is not a
#   reason to fall back: FILE is chosen and fails on the first batch (FILE's documented
#   runtime error, data/ops/options.py:94-99; so here for 2 files, tfds' or TFRecords').
# That method is run itself (on a DistributedDataset made without __init__: the rest of
# it is devices and iterators), one replica a worker, as on CPU.
def _fit_view(ds, workers: int):
    """Worker 0 of ``workers``' dataset under MWMS.experimental_distribute_dataset(ds)."""
    from tensorflow.python.distribute import input_lib

    made = object.__new__(input_lib.DistributedDataset)
    context = tf.distribute.InputContext(workers, 0, workers)
    one = types.SimpleNamespace(num_workers=1)  # between-graph: this worker alone (:903)
    made._create_cloned_datasets_from_dataset(ds, context, one, None, workers)
    return made._cloned_datasets[0]


def _fit_data(kind):
    """The dataset Keras's fit makes of the task's fit() data (its own data adapter)."""
    from keras.src.trainers.data_adapters import get_data_adapter

    args = kind({}, None).fit()
    if isinstance(args.x, tf.data.Dataset):  # fit takes a dataset batched by its user
        return get_data_adapter(args.x.batch(args.batch_size)).get_tf_dataset()
    adapter = get_data_adapter(args.x, args.y, batch_size=args.batch_size, shuffle=args.shuffle)
    return adapter.get_tf_dataset()


def _sharded_by(view) -> str:
    """FILE or DATA: where the rewrite put its ShardDataset (at the end: DATA)."""
    policy = tf.data.experimental.ExternalStatePolicy.IGNORE  # a PyDataset's generator
    graph = tf.compat.v1.GraphDef.FromString(
        view._as_serialized_graph(external_state_policy=policy).numpy()
    )
    nodes = {n.name: n for n in graph.node}
    node = nodes[next(n for n in graph.node if n.op == "_Retval").input[0]]
    while node.op in ("PrefetchDataset", "OptionsDataset", "ModelDataset"):
        node = nodes[node.input[0]]
    if node.op == "ShardDataset":
        return "DATA"
    return "FILE" if any(n.op == "ShardDataset" for n in graph.node) else "none"


def fit_baseline(kind, workers: int) -> None:
    """Worker 0 of ``workers``' input per step in the pipeline model.fit itself would run."""
    ds = _fit_data(kind)
    policy = tf.data.experimental.AutoShardPolicy(
        ds.options().experimental_distribute.auto_shard_policy
    ).name
    view = _fit_view(ds, workers)
    used = _sharded_by(view)
    how = policy if policy == used else f"{policy} -> {used}"
    head = f"{kind.__name__} fit (auto-shard {how}): worker 0 of {workers}"
    try:
        print(f"{head}: {1000 * _per_step(view):.1f} ms/step", flush=True)
    except tf.errors.InvalidArgumentError as e:
        if "Could not apply FILE based sharding" not in e.message:
            raise
        # AUTO chose FILE, and fit fails on its first batch: too few files. What its
        # error advises (DATA) is what the user must then set.
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        ds = _fit_data(kind).with_options(options)  # anew: tfds' cache() holds the failed pass
        data = _per_step(_fit_view(ds, workers))
        files = len(_files(getattr(kind, "folder", "")))
        print(
            f'{head}: fails ({files} files for {workers} workers: "Could not apply FILE '
            f'based sharding"); with DATA set, as it advises: {1000 * data:.1f} ms/step',
            flush=True,
        )


def quality() -> None:
    """The orders a dataset is read in vs ``Dataset.shuffle`` alone, on examples sorted by
    class: a stream's (fit_dataset.epoch_order) and by index (fit_slices.py)."""
    from spottrain.trainer import fit_dataset

    labels = np.repeat(np.arange(10), N // 10)  # sorted, as a folder listing is
    ds = tf.data.Dataset.from_tensor_slices((np.arange(N), labels))

    def stats(d) -> str:
        batches = list(d.batch(BATCH).as_numpy_iterator())
        pos, lab = (np.concatenate(a) for a in zip(*batches, strict=True))
        moved = np.abs(pos - np.arange(len(pos)))
        classes = np.mean([len(set(lab[i : i + BATCH])) for i in range(0, len(lab), BATCH)])
        return f"mean displacement {moved.mean():.0f}, classes in a batch {classes:.2f}"

    def engine(epoch):
        return fit_dataset.epoch_order(ds, 10_000, 7, tf.constant(epoch, tf.int64))

    print("Dataset.shuffle(10000):", stats(ds.shuffle(10_000, seed=7)))
    alone = fit_dataset.permuted_windows(ds, 10_000, tf.constant([7, 0], tf.int64))
    print("permuted windows of 10000 alone:", stats(alone))
    first, second = ([p for p, _ in engine(e).as_numpy_iterator()] for e in (0, 1))
    agree = np.mean(np.array(first) == np.array(second))
    print(f"a stream's epoch: {stats(engine(0))}; epochs 0 and 1 agree at {agree:.3f}")

    class Sorted(KerasTask):  # the same examples read by index (fit_slices.py)
        def fit(self):
            return FitArgs(ds, batch_size=BATCH, epochs=2, steps_per_epoch=N // BATCH)

    read = _pipeline(Sorted, 1, 0, 0, 2 * (N // BATCH)).unbatch()
    first, second = np.split(np.array([int(p) for p, _ in read.as_numpy_iterator()]), 2)
    agree = np.mean(first == second)
    epoch = tf.data.Dataset.from_tensor_slices((first, labels[first]))
    print(f"read by index: {stats(epoch)}; epochs 0 and 1 agree at {agree:.3f}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, nargs="+", default=[0, 10_000, 100_000])
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    p.add_argument("--quality", action="store_true", help="the dataset path's shuffle only")
    args = p.parse_args()
    if args.quality:
        return quality()
    with tempfile.TemporaryDirectory() as folder:
        if "tfrecord" in args.kinds:
            _write_records(folder)
            Records.folder = folder
        if "tfds" in args.kinds:
            Tfds.folder = os.path.join(folder, "tfds")
            _prepare_tfds(Tfds.folder)
        for name in args.kinds:
            resume(KINDS[name], args.steps)
            width(KINDS[name], args.workers)


if __name__ == "__main__":
    main()
