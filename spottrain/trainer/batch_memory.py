"""Refuses a batch that cannot fit in this machine's memory, before the first step.

Without it a batch size that is too large (``--batch-size-per-replica 1000000``)
grows the process until the kernel's OOM killer ends the trainer: exit 137, which
every orchestrator retries, after minutes, with no line saying why. Two things a
step must hold at once are counted, and compared against the memory available to the
process (the cgroup's limit, as in a pod or container, and the host's ``MemAvailable``):

* the input: two steps' batches (the one a step reads and the one ``prefetch``
  holds), from the size of one element in the task's dataset's ``element_spec``
  (nothing is decoded);
* the model's step, where it runs in the host's memory (no GPU; on one, TensorFlow's
  allocator refuses what does not fit, a line of its own): a layer's input and its
  output exist together while it runs, so the largest such pair in the model's graph,
  for this worker's examples, is a floor of what the step allocates
  (``layer_bytes``). The input alone misses the real case:
  32x32x3 uint8 images are 3 KiB an example, while the first 32-filter convolution of
  the small CNN writes 128 KiB of float32 for each, 40 times as much.

Both bounds are generous (lower bounds), so that no run that could train trips them:
a real step also keeps every activation for the backward pass, the gradients and the
optimizer's slots. A model without a graph of layers (a subclassed ``call``) gets the
input bound only.
"""

from __future__ import annotations

import math
import os

from spottrain.exits import ConfigError

# Steps' batches held at once at the least: the one in use and one prefetched.
BATCHES_HELD = 2
# Where each cgroup version's hierarchy is mounted: (mount, limit file, usage file).
_V1 = ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes")
_V2 = [(mount, "memory.max", "memory.current")
       for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")]  # fmt: skip


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _meminfo_available(path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _own_cgroups(path: str = "/proc/self/cgroup") -> list[tuple[tuple[str, str, str], str]]:
    """This process's memory cgroups: ((mount, limit file, usage file), its path)."""
    found = []
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, where = line.split(":", 2)
        if "memory" in controllers.split(","):
            found.append((_V1, where))
        elif controllers == "":
            found += [(v2, where) for v2 in _V2]
    return found


def available_bytes() -> int | None:
    """Memory this process can still get (bytes), ``None`` when nothing says.

    The least of the host's ``MemAvailable`` and the room left under each limit of
    its cgroup and of the cgroups above it.
    """
    known = [_meminfo_available()]
    for (mount, limit_file, usage_file), where in _own_cgroups():
        parts = [p for p in where.split("/") if p]
        for depth in range(len(parts), -1, -1):  # a limit may be set on any ancestor
            folder = os.path.join(mount, *parts[:depth])
            cap = _read_int(os.path.join(folder, limit_file))
            used = _read_int(os.path.join(folder, usage_file))
            if cap is not None and used is not None and cap < 2**62:  # v1's "none": ~2**63
                known.append(max(0, cap - used))
    known = [k for k in known if k is not None]
    return min(known) if known else None


def element_bytes(element_spec, batch: int) -> tuple[int, str]:
    """Bytes of one dataset element of ``batch`` examples, and how they were counted.

    The leading dimension of each tensor is its batch (``batch`` when the spec leaves
    it unknown); other unknown dimensions count as 1, so the estimate is a lower bound.
    """
    import tensorflow as tf

    total, parts = 0, []
    for spec in tf.nest.flatten(element_spec):
        shape = getattr(spec, "shape", None)
        dtype = getattr(spec, "dtype", None)
        if shape is None or dtype is None or shape.rank is None:
            continue
        dims = shape.as_list()
        rows = dims[0] if dims and dims[0] is not None else batch
        each = math.prod(d or 1 for d in dims[1:]) * max(1, dtype.size)
        total += rows * each
        parts.append(f"{'x'.join(str(d) for d in dims[1:]) or 'scalar'} {dtype.name}")
    return total, " + ".join(parts)


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def layer_bytes(model) -> tuple[int, str]:
    """Bytes per example of the largest layer input and output that exist together.

    Read from the model's graph of layers (nested models' layers too; their shapes are
    symbolic, nothing runs): ``(0, "")`` for a model without one. Unknown dimensions
    other than the batch count as 1, so this is a lower bound.
    """
    import keras

    best, name = 0, ""
    for layer, node in _nodes(model):
        tensors = keras.tree.flatten(node.arguments.keras_tensors) + keras.tree.flatten(
            node.outputs
        )
        each = sum(_per_example(t) for t in tensors)
        if each > best:
            best, name = each, layer.name
    return best, name


def _nodes(model):
    """(layer, call) of every layer called in ``model``'s graph, inside nested models too."""
    import keras

    views = _views()
    for layer in getattr(model, "layers", []):
        if isinstance(layer, keras.Model):
            yield from _nodes(layer)  # its layers, not its whole call as one
            continue
        if isinstance(layer, views):
            continue  # its output is its input's buffer: counting both would overstate
        for node in getattr(layer, "_inbound_nodes", []):
            if hasattr(node, "arguments") and hasattr(node, "outputs"):
                yield layer, node


def _accelerators() -> bool:
    import tensorflow as tf

    return any(tf.config.list_logical_devices(kind) for kind in ("GPU", "TPU"))


def _views():
    import keras

    return (keras.layers.Reshape, keras.layers.Flatten, keras.layers.Identity)


def _per_example(tensor) -> int:
    import tensorflow as tf

    shape = getattr(tensor, "shape", None)
    if not shape or shape[0] is not None:  # a scalar, or not batched: not per example
        return 0
    try:
        size = tf.as_dtype(tensor.dtype).size
    except TypeError:
        return 0
    return math.prod(d or 1 for d in shape[1:]) * max(1, size)


def check_batch_fits(
    element_spec, batch: int, elements_per_step: int, flag: str, model=None
) -> None:
    """Raises ConfigError (exit 64) when a step's batches cannot fit in memory.

    Args:
        element_spec: The task's training dataset's ``element_spec``.
        batch: Examples per element (the per-replica batch).
        elements_per_step: Elements this worker reads per step (its local replicas).
        flag: The flag and value that set the batch, for the line.
        model: The model the step trains (its largest layer: ``layer_bytes``).
    """
    available = available_bytes()
    if available is None:
        return
    each, counted = element_bytes(element_spec, batch)
    step = each * elements_per_step
    if step * BATCHES_HELD > available:
        raise ConfigError(
            f"{flag}: a step's batch on this worker is {_gib(step)} decoded "
            f"({batch * elements_per_step} x {counted}), and {BATCHES_HELD} of them do not fit "
            f"in the {_gib(available)} of memory available; lower it"
        )
    # On an accelerator the activations are in its memory, not the host's: TensorFlow's
    # allocator refuses what does not fit there (ResourceExhausted: the step's own line).
    on_host = model is not None and not _accelerators()
    per_example, layer = layer_bytes(model) if on_host else (0, "")
    examples = batch * elements_per_step
    needs = step * BATCHES_HELD + per_example * examples
    if per_example and needs > available:
        raise ConfigError(
            f"{flag}: a step on this worker needs at least {_gib(needs)} (the input and "
            f"output of layer {layer!r} for {examples} examples: {_gib(per_example * examples)}; "
            f"{BATCHES_HELD} input batches: {_gib(step * BATCHES_HELD)}), more than the "
            f"{_gib(available)} of memory available; lower it"
        )
