"""The train batches of each kind of data ``model.fit`` takes, as a function of ``(seed, step)``.

:mod:`spottrain.trainer.fit_plan` decides the run's length and batch; this module
makes one worker's pipeline for it. Data position ``p`` is the engine's step plus the
plan's ``first`` (``initial_epoch x steps_per_epoch``); epoch ``e`` is positions
``[e*spe, (e+1)*spe)``, whatever the restarts.

- **arrays** (``x``, ``(x, y)``, ``(x, y, sample_weight)``, lists and dicts of them):
  index arithmetic. Epoch ``e``'s order is a stateless permutation of the examples
  (``tf.random.experimental.index_shuffle`` seeded by ``(seed, e)``), so the batch of
  position ``p`` is a gather of this worker's indices: a resume at step ``s`` reads
  nothing before it, and each worker reads only its share.
- **a tf.data dataset**: single examples (as :mod:`spottrain.trainer.fit_input` makes
  them), each epoch a pass shuffled by ``(seed, epoch)`` (a buffer of the task's
  ``shuffle_buffer``), batched (the remainder dropped): :mod:`spottrain.trainer.fit_dataset`.
- **a keras.utils.PyDataset** (batch ``i`` is ``ds[i]``, ``len(ds)`` an epoch): epoch
  ``e`` reads the batches in a seeded permutation of their indices (fit shuffles a
  PyDataset's batch order each epoch: ``py_dataset_adapter.py``,
  ``PyDatasetAdapter._finite_generator``); a resume reads only from its step on.
- **a Python generator** (or generator function): read from its start through to the
  resumed step (a generator cannot seek); its batches are the global batches.
"""

from __future__ import annotations

import inspect
import logging
import types
from dataclasses import dataclass
from typing import Any

from spottrain.exits import ConfigError
from spottrain.trainer import fit_input

log = logging.getLogger("trainer")

ARRAYS, DATASET, PYDATASET, GENERATOR = "arrays", "dataset", "PyDataset", "generator"


@dataclass
class Source:
    """One task's training data, classified once a process.

    Attributes:
        kind: ``ARRAYS``, ``DATASET``, ``PYDATASET`` or ``GENERATOR``.
        data: Arrays (the train part, class weights applied), a PyDataset, or None.
        examples: Examples an epoch (arrays, a dataset of known length), else None.
        batch: The data's own global batch (PyDataset, generator), else None.
        batches: Batches an epoch of a finite PyDataset (a short last one dropped).
        held_out: ``validation_split``'s part of the arrays (fit's last fraction).
    """

    kind: str
    data: Any = None
    examples: int | None = None
    batch: int | None = None
    batches: int | None = None
    held_out: Any = None
    spec: Any = None  # a PyDataset's or generator's batch spec (leading dim None)
    tensors: Any = None  # the arrays as tensors, made once a process (every pipeline's)


def is_generator(x) -> bool:
    """A generator, or a generator function (called again for each read from the start)."""
    return isinstance(x, types.GeneratorType) or inspect.isgeneratorfunction(x)


def classify(args, owner: str, batched: bool | None) -> Source:
    """What ``args`` (a ``FitArgs``) gives to train on; refuses what fit refuses, in one line."""
    import keras
    import tensorflow as tf

    x = args.x
    if x is None:
        raise ConfigError(f"{owner} gives x=None: give the data model.fit would take")
    if isinstance(x, tf.data.Dataset | keras.utils.PyDataset) or is_generator(x):
        kind = (
            DATASET
            if isinstance(x, tf.data.Dataset)
            else PYDATASET
            if isinstance(x, keras.utils.PyDataset)
            else GENERATOR
        )
        # As fit refuses them (keras/src/trainers/data_adapters/__init__.py, get_data_adapter).
        for name in ("y", "sample_weight"):
            if getattr(args, name) is not None:
                raise ConfigError(
                    f"{owner}: {name}= with x a {kind}: include it in the {kind}'s elements, "
                    "as model.fit requires"
                )
        if args.validation_split:
            raise ConfigError(
                f"{owner}: validation_split={args.validation_split} needs arrays (as model.fit); "
                f"x is a {kind}: give validation_data"
            )
        if args.batch_size is not None and kind != DATASET:
            # model.fit takes it and ignores it (keras/src/trainers/data_adapters/__init__.py,
            # get_data_adapter: a PyDataset's or generator's adapter gets no batch_size).
            log.info(
                "%s: batch_size=%s is not used with x a %s: its batches are the global "
                "batches, as under model.fit",
                owner, args.batch_size, kind,
            )  # fmt: skip
        if kind == GENERATOR and args.class_weight is not None:
            raise ConfigError(
                f"{owner}: class_weight with a generator is not supported (nor by model.fit): "
                "yield (x, y, sample_weight)"
            )
        if kind == DATASET:
            return Source(DATASET, examples=_known_examples(x, batched))
        if kind == PYDATASET:
            return _pydataset(x, args.class_weight, owner)
        return _generator_source(x, owner)
    data = fit_input._tuples(x if args.y is None else _pack(x, args.y, args.sample_weight))
    if args.y is None and args.sample_weight is not None:
        raise ConfigError(f"{owner}: sample_weight= without y= (model.fit needs y for it)")
    n = _length(data, owner)
    held_out = None
    if args.validation_split:
        from keras.src.trainers.data_adapters import array_slicing

        split = args.validation_split
        if not 0 < split < 1:
            raise ConfigError(f"{owner}: validation_split={split} must be in (0, 1)")
        try:
            data, held_out = array_slicing.train_validation_split(data, split)
        except ValueError as e:
            raise ConfigError(f"{owner}: validation_split={split}: {_first_line(e)}") from None
        n = _length(data, owner)
    if args.class_weight is not None:
        data = _class_weighted(data, args.class_weight, owner)
    return Source(ARRAYS, data=data, examples=n, held_out=held_out)


def _pack(x, y, sample_weight):
    return (x, y) if sample_weight is None else (x, y, sample_weight)


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def _length(data, owner: str) -> int:
    import tensorflow as tf

    lengths = set()
    for leaf in tf.nest.flatten(data):
        shape = getattr(leaf, "shape", None)
        if not shape:
            raise ConfigError(
                f"{owner} must give what model.fit takes (arrays x, (x, y) or (x, y, "
                f"sample_weight), dicts or lists of arrays, a tf.data.Dataset, a PyDataset or "
                f"a generator); got {type(leaf).__name__}"
            )
        lengths.add(int(shape[0]))
    if len(lengths) != 1:
        raise ConfigError(
            f"{owner} must give what model.fit takes: arrays of one length, not {sorted(lengths)}"
        )
    return lengths.pop()


def _class_weighted(data, class_weight: dict, owner: str):
    """(x, y) + fit's sample weights from ``class_weight`` (``class_weight_to_sample_weights``)."""
    import tensorflow as tf
    from keras.src.trainers.data_adapters import data_adapter_utils

    if not isinstance(data, tuple) or len(data) != 2:
        with_what = "sample_weight" if isinstance(data, tuple) and len(data) == 3 else "no y"
        raise ConfigError(f"{owner}: class_weight with {with_what} (model.fit refuses it too)")
    if tf.nest.is_nested(data[1]):
        raise ConfigError(
            f"{owner}: class_weight is only for a model with a single output (as in model.fit)"
        )
    weights = data_adapter_utils.class_weight_to_sample_weights(data[1], class_weight)
    return (*data, weights)


def _known_examples(ds, batched) -> int | None:
    """Examples a pass of a dataset of single examples, when tf.data knows it."""
    if fit_input.is_batched(ds) if batched is None else batched:
        from spottrain.trainer import fit_slices

        # Unbatching loses the count (a short last batch), unless the examples are slices.
        made = fit_slices.slices(ds.unbatch())
        return made.count if made is not None else None
    n = int(ds.cardinality())
    return n if n >= 0 else None  # INFINITE (-1) or UNKNOWN (-2)


def _standard(batch):
    """A PyDataset's batch as fit reads it (``PyDatasetAdapter._standardize_batch``)."""
    import numpy as np

    if isinstance(batch, np.ndarray):
        return (batch,)
    return fit_input._tuples(batch)


def _batch_size(batch, owner: str) -> int:
    import tensorflow as tf

    sizes = {int(getattr(t, "shape", [0])[0]) for t in tf.nest.flatten(batch)}
    if len(sizes) != 1:
        raise ConfigError(f"{owner}: a batch's parts have unequal lengths {sorted(sizes)}")
    return sizes.pop()


def _spec(batch):
    import tensorflow as tf

    def one(t):
        t = tf.convert_to_tensor(t)
        return tf.TensorSpec([None, *t.shape[1:]], t.dtype)

    return tf.nest.map_structure(one, batch)


def _pydataset(ds, class_weight, owner: str) -> Source:
    try:
        count = ds.num_batches
    except NotImplementedError:
        count = None
    first = _weighted(_standard(ds[0]), class_weight, owner)
    size = _batch_size(first, owner)
    if count is not None:
        if count < 1:
            raise ConfigError(f"{owner}: the PyDataset is empty (len 0)")
        last = _batch_size(_standard(ds[count - 1]), owner) if count > 1 else size
        if last != size:
            log.info(
                "%s: the PyDataset's last batch (%d examples, not %d) is dropped: every "
                "worker cuts the same global batch",
                owner, last, size,
            )  # fmt: skip
            count -= 1
    return Source(PYDATASET, data=ds, batch=size, batches=count, spec=_spec(first))


def _weighted(batch, class_weight, owner: str):
    """A PyDataset batch with fit's class weights (``PyDatasetAdapter._standardize_batch``)."""
    if class_weight is None:
        return batch
    if isinstance(batch, tuple) and len(batch) == 2:
        from keras.src.trainers.data_adapters import data_adapter_utils

        return (*batch, data_adapter_utils.class_weight_to_sample_weights(batch[1], class_weight))
    raise ConfigError(
        f"{owner}: class_weight needs (x, y) batches, without sample_weight (as model.fit)"
    )


def _generator_source(gen, owner: str) -> Source:
    it = gen() if inspect.isgeneratorfunction(gen) else gen
    try:
        first = _standard(next(it))
    except StopIteration:
        raise ConfigError(f"{owner}: the generator yields nothing") from None
    return Source(GENERATOR, batch=_batch_size(first, owner), spec=_spec(first))


# -- one worker's pipeline ----------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """What one pipeline reads: data positions ``[first + start, first + total)``."""

    spec: Any  # the TrainInput
    steps_per_epoch: int | None
    first: int
    shuffle: bool
    class_weight: Any = None


def indices_at(w: Window, n: int, shuffle: bool):
    """``p -> indices``: this worker's examples (of ``n``) in the batch of data position ``p``.

    Its part of the global batch ``p % spe`` of epoch ``e = p // spe``, in epoch ``e``'s
    order when ``shuffle``: a stateless permutation seeded by ``(seed, e)``
    (``index_shuffle``), so any position is computed, never read through to.
    """
    import tensorflow as tf

    spec, spe = w.spec, w.steps_per_epoch
    mine = tf.range(spec.worker_slice.start, spec.worker_slice.stop, dtype=tf.int64)
    seed = tf.constant(spec.seed, tf.int64)

    def at(p):
        epoch, j = p // spe, p % spe
        indices = j * spec.global_batch + mine
        if shuffle:
            indices = tf.random.experimental.index_shuffle(indices, tf.stack([seed, epoch]), n - 1)
        return indices

    return at


def arrays_dataset(src: Source, w: Window):
    """Index arithmetic over arrays: the batch of position ``p`` gathered, this worker's part."""
    import tensorflow as tf

    spec = w.spec
    if src.tensors is None:
        src.tensors = tf.nest.map_structure(tf.convert_to_tensor, src.data)
    tensors = src.tensors
    indices = indices_at(w, src.examples, w.shuffle)

    def batch_of(p):
        at = indices(p)
        return tf.nest.map_structure(lambda t: tf.gather(t, at), tensors)

    start, stop = w.first + spec.start_step, w.first + spec.total_steps
    ds = tf.data.Dataset.range(start, stop).map(batch_of)
    return finish(ds, spec)


def pydataset_dataset(src: Source, w: Window):
    """A PyDataset by index: epoch e's batches in ``seed_order(e)``, from the resumed step."""
    import tensorflow as tf

    spec, spe, ds, part = w.spec, w.steps_per_epoch, src.data, w.spec.worker_slice
    signature = _worker_spec(src.spec, spec)

    def batches():
        orders = {}
        for p in range(w.first + spec.start_step, w.first + spec.total_steps):
            if src.batches is None:  # infinite: position p is index p
                index = p
            else:
                epoch, j = divmod(p, spe)
                if epoch not in orders:
                    orders.clear()
                    orders[epoch] = epoch_order(spec.seed, epoch, src.batches, w.shuffle)
                index = int(orders[epoch][j])
            batch = _weighted(_standard(ds[index]), w.class_weight, "PyDataset")
            yield _cut(batch, part, spec.global_batch, index)

    return finish(tf.data.Dataset.from_generator(batches, output_signature=signature), spec)


def epoch_order(seed: int, epoch: int, count: int, shuffle: bool):
    """A PyDataset's batch indices in epoch ``epoch``: a permutation seeded by ``(seed, epoch)``."""
    import numpy as np

    if not shuffle:
        return np.arange(count)
    return np.random.default_rng([seed, epoch]).permutation(count)


def generator_dataset(fresh, src: Source, w: Window):
    """A generator read from its start: through to the resumed step, then this worker's part."""
    import tensorflow as tf

    spec, part = w.spec, w.spec.worker_slice
    signature = _worker_spec(src.spec, spec)
    if w.first + spec.start_step:
        log.warning(
            "input: a resume at step %d reads all %d batches before it from the generator's "
            "start (a generator cannot seek: a keras.utils.PyDataset is read by index)",
            spec.start_step, w.first + spec.start_step,
        )  # fmt: skip

    def batches():
        it = fresh()
        for _ in range(w.first + spec.start_step):  # a generator cannot seek: read through
            next(it, None)
        for _ in range(spec.start_step, spec.total_steps):
            try:
                batch = _standard(next(it))
            except StopIteration:
                return  # the engine says which step it ended before
            yield _cut(batch, part, spec.global_batch, "the generator's")

    return finish(tf.data.Dataset.from_generator(batches, output_signature=signature), spec)


def _cut(batch, part, global_batch: int, which):
    import tensorflow as tf

    size = _batch_size(batch, "")
    if size != global_batch:
        raise ValueError(
            f"batch {which} has {size} examples, not the global batch {global_batch}: every "
            "batch must have the same size"
        )
    return tf.nest.map_structure(lambda t: t[part.start : part.stop], batch)


def _worker_spec(batch_spec, spec):
    import tensorflow as tf

    rows = spec.worker_slice.stop - spec.worker_slice.start
    return tf.nest.map_structure(lambda s: tf.TensorSpec([rows, *s.shape[1:]], s.dtype), batch_spec)


def finish(ds, spec):
    """Per-replica batches, prefetched, in a deterministic order (every pipeline's end)."""
    import tensorflow as tf

    ds = ds.rebatch(spec.per_replica_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = True
    return ds.with_options(options)
