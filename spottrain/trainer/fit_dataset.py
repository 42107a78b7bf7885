"""A ``tf.data`` dataset as ``model.fit`` data: epochs that a resume reaches in one epoch at most.

A dataset cannot seek: the batch at data position ``p`` is only found by reading the
batches before it. Read from the start (as the engine did), a resume at step 100,000
reads 100,000 batches before its first step, on every restart. So epoch ``e`` is its
own pass of the task's dataset, in an order of ``(seed, e)``
(``Dataset.range(e0, ...).flat_map``): the batches of epoch ``e`` do not depend on the
passes before it, and a resume starts at its epoch and reads at most the epoch's
batches before its step (Keras's ``BackupAndRestore`` is bounded by one epoch too).

That holds only when every pass of the task's dataset yields the same elements. One
that reshuffles each pass (``shuffle(reshuffle_each_iteration=True)``, the default, or
``list_files(shuffle=True)``), draws from stateful random ops in a ``map``
(``tf.image.random_*``, ``tf.random.uniform``), or updates variables there (a Keras
preprocessing layer's seed generator) yields what depends on how many passes came
before; it is read from the start as before, and a line says why and what it costs.
"""

from __future__ import annotations

import logging
import math

from spottrain.trainer.stateful_ops import STATEFUL_RANDOM_OPS

log = logging.getLogger("trainer")

# Ops a pass of a dataset draws from or writes to, so that another pass (or the same
# pass in a new process) differs: each kernel keeps its position to itself.
_PASS_STATE = STATEFUL_RANDOM_OPS | {
    "RandomDataset",
    "RandomDatasetV2",
    "AssignVariableOp",
    "AssignAddVariableOp",
    "AssignSubVariableOp",
}
_SHUFFLES = {"ShuffleDataset", "ShuffleDatasetV2", "ShuffleDatasetV3", "ShuffleAndRepeatDataset",
             "ShuffleAndRepeatDatasetV2"}  # fmt: skip


def replay_problem(dataset, shuffle_replaced: bool = False) -> str | None:
    """``None`` when every pass of ``dataset`` yields the same elements, else why not.

    ``shuffle_replaced``: the engine replaces the dataset's shuffle (read by index,
    :mod:`spottrain.trainer.fit_slices`), so only what its maps draw matters.
    """
    try:
        ops = _ops(dataset)
    except Exception as e:  # noqa: BLE001 - unknown: read from the start, and say so
        return f"its graph cannot be read ({type(e).__name__})"
    reshuffles = sorted({op for op, reshuffle in ops if op in _SHUFFLES and reshuffle})
    if shuffle_replaced:
        reshuffles = []
    if reshuffles:
        return (
            f"it reshuffles each pass ({reshuffles[0]}, reshuffle_each_iteration=True): "
            "give the engine the shuffle (FitArgs(shuffle=True) shuffles each epoch by "
            "(seed, epoch)) or pass reshuffle_each_iteration=False"
        )
    drawn = sorted({op for op, _ in ops if op in _PASS_STATE})
    if drawn:
        return (
            f"it draws from state a pass changes ({', '.join(drawn)}): use "
            "tf.random.stateless_* / tf.image.stateless_random_* seeded by the element"
        )
    return None


def _ops(dataset) -> list[tuple[str, bool]]:
    """``(op, reshuffles each pass)`` of every dataset in ``dataset``'s tree and its functions.

    Read from the Python datasets (``_inputs()``, as ``fit_input.is_batched`` walks them)
    and their functions' graphs, not by serializing the dataset (``DatasetToGraphV2``):
    that copies every tensor a ``from_tensor_slices`` holds (0.75 s and a second copy of
    184 MB for 60,000 CIFAR-shaped examples, on every pipeline). A dataset made from a
    variant alone hides its inputs: that one is serialized.
    """
    import tensorflow as tf

    ops, todo, seen = [], [dataset], set()
    while todo:
        ds = todo.pop()
        if id(ds) in seen:
            continue
        seen.add(id(ds))
        if type(ds).__name__ == "_VariantDataset":
            serialized = tf.raw_ops.DatasetToGraphV2(input_dataset=ds._variant_tensor)
            ops += _node_ops(tf.compat.v1.GraphDef.FromString(serialized.numpy()))
            continue
        if hasattr(ds, "_reshuffle_each_iteration"):  # Dataset.shuffle
            ops.append(("ShuffleDataset", bool(ds._reshuffle_each_iteration)))
        elif type(ds).__name__ == "_RandomDataset":
            ops.append(("RandomDataset", False))
        for value in vars(ds).values():  # map/filter/flat_map/interleave... functions
            graph = getattr(getattr(value, "function", None), "graph", None)
            if graph is not None:
                ops += _node_ops(graph.as_graph_def())
        todo.extend(ds._inputs())
    return ops


def _node_ops(graph_def) -> list[tuple[str, bool]]:
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    return [
        (n.op, "reshuffle_each_iteration" not in n.attr or n.attr["reshuffle_each_iteration"].b)
        for n in nodes
    ]


# An epoch's order: its pass permuted in windows of _WINDOW elements by (seed, epoch),
# then shuffled in the task's buffer with the run's seed, the same draws every epoch.
# Not Dataset.shuffle(seed=<made from the epoch>): that seed is a tensor inside
# flat_map, and tf.data's random_seed.get_seed compares (global seed, op seed) to
# (0, 0), which raises for a tensor when the global seed is 0 (--seed 0). Measured on
# 60,000 examples sorted by class (python bench/fit_resume_cost.py --quality):
# windows then a 10,000 buffer mix as the buffer alone (6.7 classes in a batch of 256,
# mean displacement 6,650), and two epochs agree at 0.4 % of positions; windows of
# 10,000 alone gave 2.4 classes.
_WINDOW = 256


def epoch_order(ds, buffer: int, seed: int, epoch):
    """Epoch ``epoch``'s pass of ``ds`` in its order of ``(seed, epoch)`` (see above)."""
    import tensorflow as tf

    windows = permuted_windows(ds, _WINDOW, tf.stack([tf.constant(seed, tf.int64), epoch]))
    return windows.shuffle(buffer, seed=seed, reshuffle_each_iteration=False)


def permuted_windows(ds, window: int, seed):
    """``ds`` with each run of ``window`` elements permuted by ``(seed, window's index)``."""
    import tensorflow as tf

    def permute(index, elements):
        count = tf.shape(tf.nest.flatten(elements)[0], out_type=tf.int64)[0]
        order = tf.random.experimental.stateless_shuffle(
            tf.range(count), seed=tf.random.experimental.stateless_fold_in(seed, index)
        )
        picked = tf.nest.map_structure(lambda t: tf.gather(t, order), elements)
        return tf.data.Dataset.from_tensor_slices(picked)

    return ds.batch(window).enumerate().flat_map(permute)


def dataset_dataset(examples, src, w, buffer: int):
    """A tf.data dataset of single examples: ``w``'s positions, this worker's part.

    ``src`` is the :class:`~spottrain.trainer.fit_sources.Source`, ``w`` the
    :class:`~spottrain.trainer.fit_sources.Window`, ``buffer`` the task's shuffle buffer.
    """
    import tensorflow as tf

    from spottrain.trainer import fit_slices, fit_sources

    spec, part, spe = w.spec, w.spec.worker_slice, w.steps_per_epoch
    start, stop = w.first + spec.start_step, w.first + spec.total_steps
    made = fit_slices.slices(examples) if spe else None
    if made is not None and spe * spec.global_batch <= made.count:
        if replay_problem(examples, shuffle_replaced=True) is None:
            at = fit_sources.indices_at(w, made.count, w.shuffle or made.shuffled)
            mine = fit_slices.slices_dataset(made, w, at)
            return _weighted_finish(mine, w)
    problem = replay_problem(examples) if spe else "its epoch length is not known"
    # The order is made on what the maps read (records, file names: small), and each
    # worker maps (parses, decodes, augments) only its share of each global batch: a
    # map acts on one element, so the elements and their order are the same.
    records, maps, _ = fit_slices.peel(examples, through_shuffles=False)
    if problem is None:
        first_epoch = start // spe

        def epochs_of(records, first):
            def epoch(e):
                ds = epoch_order(records, buffer, spec.seed, e) if w.shuffle else records
                return ds.batch(spec.global_batch, drop_remainder=True).take(spe)

            return tf.data.Dataset.range(first, math.ceil(stop / spe) + 1).flat_map(epoch)

        raw, raw_maps, _ = fit_slices.peel(examples, False, through_caches=True)
        if raw is not records:
            # A cache after a map (the maps below it run once a process): the process's
            # first epoch is read without it (the records before its step skipped
            # unmapped, the maps on this worker's share), the cache filled by the next
            # epoch's whole pass, so a restart costs the same at any step. The same
            # elements in the same order: a cache changes none.
            left, steps = spe - start % spe, spec.total_steps - spec.start_step
            resumed = epochs_of(raw, first_epoch).take(spe).skip(start % spe).take(steps)
            later = epochs_of(records, first_epoch + 1).take(max(0, steps - left))
            ds = _mapped(resumed, raw_maps, part).concatenate(_mapped(later, maps, part))
            log.info(
                "input: from step %d, %d batches of epoch %d skipped unmapped (the cache "
                "after a map is filled from the next epoch on)",
                spec.start_step, start % spe, first_epoch + 1,
            )  # fmt: skip
            return _weighted_finish(ds, w)
        ds = epochs_of(records, first_epoch).skip(start - first_epoch * spe)
        if spec.start_step:
            log.info(
                "input: a resume at step %d reads %d batches of epoch %d before it (a "
                "dataset cannot seek: at most one epoch, %d batches)",
                spec.start_step, start - first_epoch * spe, first_epoch + 1, spe,
            )  # fmt: skip
    else:
        ds = records
        if w.shuffle:
            ds = ds.shuffle(buffer, seed=spec.seed, reshuffle_each_iteration=True)
        ds = ds.batch(spec.global_batch, drop_remainder=True)
        if spe:
            ds = ds.take(spe)  # an epoch is steps_per_epoch batches of a pass
        ds = ds.repeat().skip(start)
        if spec.start_step:
            log.warning(
                "input: a resume at step %d reads all %d batches before it from the start "
                "of the task's dataset, because %s",
                spec.start_step, start, problem,
            )  # fmt: skip

    ds = _mapped(ds.take(spec.total_steps - spec.start_step), maps, part)
    return _weighted_finish(ds, w)


def _mapped(ds, maps, part):
    """This worker's ``part`` of each global batch of ``ds``, then ``maps`` on it alone."""
    import tensorflow as tf

    from spottrain.trainer import fit_slices

    def this_workers(*element):
        # Every tensor of the element: (x, y), (x, y, w), several inputs, dicts.
        element = element[0] if len(element) == 1 else element
        return tf.nest.map_structure(lambda t: t[part.start : part.stop], element)

    ds = ds.map(this_workers)
    if maps:
        ds = fit_slices.reapply(ds.unbatch(), maps).batch(part.stop - part.start)
    return ds


def _weighted_finish(ds, w):
    """This worker's batches with ``class_weight``'s sample weights, finished."""
    from spottrain.trainer import fit_sources

    if w.class_weight is not None:
        from keras.src.trainers.data_adapters import tf_dataset_adapter

        ds = ds.map(tf_dataset_adapter.make_class_weight_map_fn(w.class_weight))
    return fit_sources.finish(ds, w.spec)
