"""A dataset of in-memory slices and element-wise maps, read by index as arrays are.

``tf.data.Dataset.from_tensor_slices((x, y)).shuffle(n).map(augment).batch(b)`` is
the dataset most ``model.fit`` scripts give. Its examples are tensors the process
holds; its maps act on one example at a time. So it need not be read as a stream
(:mod:`spottrain.trainer.fit_dataset`, at most an epoch before a resumed step, and the
whole global batch by every worker): the batch of data position ``p`` is, as for
arrays (:func:`spottrain.trainer.fit_sources.arrays_dataset`), a gather of this
worker's indices in epoch ``e``'s permutation (``index_shuffle`` seeded by
``(seed, e)``), then the task's maps on those examples only. A resume reads nothing
before its step; each worker maps only its share, and the batch of step ``s`` is the
same whatever the number of workers.

The chain is read from tf.data's own Python datasets (``_inputs()``), outermost
first; it is taken by index only when it is, and nothing else:

- a ``from_tensor_slices`` of dense tensors at its root;
- element-wise ``map`` calls (sequential or parallel; their functions re-run as
  traced, not retraced), and ``prefetch``, ``with_options``, ``assert_cardinality``,
  which change no element, and a ``cache`` with no map below it;
- a ``shuffle`` of single examples: the engine's permutation of each epoch replaces
  it (a uniform shuffle; a buffer only approximates one);
- ``batch(...)`` undone by the engine's ``unbatch`` with nothing but the above
  between them (a batch-level ``map`` is not element-wise: the stream path reads it).

A ``cache`` after a map is the user's choice to map each example once and keep the
results: it is kept, and the dataset read as a stream (each worker maps every example
once, then reads its cache), where by index the maps would run again each epoch.
Anything else (``filter``, ``take``, ``interleave``, files, a map that draws from a
stateful random op: :func:`spottrain.trainer.fit_dataset.replay_problem`) is read as a
stream.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("trainer")

# Datasets that pass each element through unchanged, in order.
_SAME = {
    "_PrefetchDataset",
    "_OptionsDataset",
    "CacheDataset",
    "_CacheDataset",
    "_MemoryCacheDataset",
    "_AssertCardinalityDataset",
}
_CACHES = {"CacheDataset", "_CacheDataset", "_MemoryCacheDataset"}
_MAPS = {"_MapDataset", "_ParallelMapDataset"}
_BATCHES = {"_BatchDataset", "_ParallelBatchDataset"}


@dataclass(frozen=True)
class Slices:
    """What a dataset is made of, when it is slices and element-wise maps."""

    root: Any  # the _TensorSliceDataset
    maps: tuple  # (input spec, StructuredFunctionWrapper) of each map, the first applied first
    shuffled: bool  # the chain shuffled its examples (replaced by the engine's order)

    @property
    def count(self) -> int:
        """Examples a pass."""
        return int(self.root._tensors[0].shape[0])


def peel(dataset, through_shuffles: bool, through_caches: bool = False):
    """``(inner, maps, shuffled)``: ``dataset`` is ``maps`` (element-wise) applied to ``inner``.

    Peels from the outermost dataset what changes no element's position: maps, the
    datasets of ``_SAME``, a ``batch`` undone by the engine's ``unbatch``, and (when
    ``through_shuffles``) shuffles, whose order the engine replaces; ``shuffled`` says
    one was peeled. A cache with a map below it is peeled only ``through_caches``.
    ``inner`` is the first dataset that is none of these.
    """
    maps, shuffled, ds = [], False, dataset
    clean = (dataset, (), False)  # the last point outside a batch the engine unbatches
    unbatched = False
    while ds is not None:
        name = type(ds).__name__
        if not unbatched:
            clean = (ds, tuple(reversed(maps)), shuffled)
        if name == "_UnbatchDataset" and not unbatched:
            unbatched = True
            ds = ds._input_dataset
            if type(ds).__name__ == "_RestructuredDataset":  # unbatch's normalize_to_dense
                ds = ds._input_dataset._input_dataset
            continue
        if name in _BATCHES and unbatched:
            unbatched = False
        elif name in _MAPS and not unbatched:
            maps.append((ds._input_dataset.element_spec, ds._map_func))
        elif name == "_ShuffleDataset" and not unbatched and through_shuffles:
            shuffled = True
        elif name in _CACHES and not through_caches and _maps_below(ds):
            break  # the maps below it run once: peeled, they would run every epoch
        elif name not in _SAME:
            break
        inputs = ds._inputs()
        ds = inputs[0] if len(inputs) == 1 else None
    return clean


def _maps_below(ds) -> bool:
    """Whether an element-wise map is in ``ds``'s chain of single inputs."""
    while ds is not None:
        inputs = ds._inputs()
        ds = inputs[0] if len(inputs) == 1 else None
        if ds is not None and type(ds).__name__ in _MAPS:
            return True
    return False


def slices(dataset) -> Slices | None:
    """``dataset`` as :class:`Slices`, or ``None`` when it is anything else (see module)."""
    import tensorflow as tf

    root, maps, shuffled = peel(dataset, through_shuffles=True)
    if type(root).__name__ != "_TensorSliceDataset":
        return None
    dense = all(isinstance(s, tf.TensorSpec) for s in tf.nest.flatten(root.element_spec))
    if not dense or not root._tensors[0].shape[0]:
        return None
    return Slices(root, maps, shuffled)


def reapply(ds, maps):
    """``ds`` with ``maps`` (from :func:`peel`) applied, in parallel, in order."""
    import tensorflow as tf

    for input_spec, wrapper in maps:
        again = _reapplied(input_spec, wrapper)
        ds = ds.map(again, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds


def _reapplied(input_spec, wrapper):
    """A map function that runs ``wrapper``'s traced function, packing as tf.data does."""
    import tensorflow as tf
    from tensorflow.python.data.ops import structured_function
    from tensorflow.python.data.util import structure

    unpacked = structured_function._should_unpack(input_spec)  # as Dataset.map calls it

    def call(*args):
        element = args if unpacked else args[0]
        flat = structure.to_tensor_list(input_spec, element)
        out = wrapper.function(*flat)
        return structure.from_compatible_tensor_list(wrapper.output_structure, out)

    return tf.autograph.experimental.do_not_convert(call)


def slices_dataset(made: Slices, w, indices):
    """This worker's batches of ``made``, positions ``w``'s: gathers, then the maps.

    ``w`` is the :class:`~spottrain.trainer.fit_sources.Window`; ``indices`` maps a
    position to this worker's examples in it (``fit_sources.indices_at``, which arrays
    use too).
    """
    import tensorflow as tf

    spec, spe, root = w.spec, w.steps_per_epoch, made.root
    part = spec.worker_slice

    def examples_of(p):
        at = indices(p)
        gathered = [tf.gather(t, at) for t in root._tensors]
        return tf.nest.pack_sequence_as(root.element_spec, gathered)

    start, stop = w.first + spec.start_step, w.first + spec.total_steps
    if spec.start_step:
        log.info(
            "input: a resume at step %d reads no batch before it (in-memory slices, read "
            "by index: epoch %d's permutation by (seed, epoch))",
            spec.start_step, start // spe + 1,
        )  # fmt: skip
    ds = reapply(tf.data.Dataset.range(start, stop).map(examples_of).unbatch(), made.maps)
    return ds.batch(part.stop - part.start, drop_remainder=True)
