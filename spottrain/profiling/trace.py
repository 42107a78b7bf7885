"""Reads the profiler's trace (XSpace protobuf) into op times, device busy time and collectives.

The TensorFlow Profiler writes one ``*.xplane.pb`` per host: planes for the host
threads (TF ops, tf.data stages) and for each device (kernels, copies). This module
reduces them to a :class:`TraceSummary`, the only trace input the analysis needs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# tensorflow/core/framework/types.proto
DTYPE_NAMES = {1: "float32", 2: "float64", 14: "bfloat16", 19: "float16"}
DTYPES_16BIT = {14, 19}
DTYPES_32BIT = {1}
_COLLECTIVE = re.compile(r"Collective(Reduce|Gather|Bcast|AllToAll)|Nccl|AllReduce", re.I)
_DEVICE_COLLECTIVE = re.compile(r"nccl|allreduce", re.I)
_MEMCPY = re.compile(r"^(Memcpy|Memset|memcpy|memset)")


class ProfileError(RuntimeError):
    """The profile could not be taken or read; the message names the value."""


@dataclass
class OpTime:
    """Self time of one op (by node name) inside the profiled window."""

    name: str
    type: str
    where: str  # "host", "device" or "input"
    calls: int = 0
    self_ps: int = 0
    dtype: int | None = None  # tensorflow DataType enum of its output, when known


@dataclass
class TraceSummary:
    """What the analysis needs from an XSpace (times in picoseconds)."""

    host_ops: dict[str, OpTime] = field(default_factory=dict)
    input_ops: dict[str, OpTime] = field(default_factory=dict)
    input_stages: dict[str, int] = field(default_factory=dict)  # tf.data iterator self time
    device_ops: dict[str, OpTime] = field(default_factory=dict)
    device_planes: list[str] = field(default_factory=list)
    device_busy_ps: list[int] = field(default_factory=list)  # compute per device plane
    collective_ps: int = 0  # host collective ops (CPU / gRPC ring)
    device_collective_ps: int = 0  # device collective kernels (NCCL)
    span_ps: int = 0  # first to last event on the host
    dtypes: dict[str, int] = field(default_factory=dict)  # op name -> output dtype


def find_xplanes(run_dir: str) -> list[str]:
    """The ``*.xplane.pb`` files of one profile run directory."""
    import tensorflow as tf

    return sorted(tf.io.gfile.glob(f"{run_dir.rstrip('/')}/*.xplane.pb"))


def load_xspace(path: str):
    """Parses one ``.xplane.pb`` file into an XSpace message."""
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with tf.io.gfile.GFile(path, "rb") as f:
        space.ParseFromString(f.read())
    return space


def _stat_value(plane, stat):
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        meta = plane.stat_metadata.get(stat.ref_value)
        return meta.name if meta is not None else ""
    return getattr(stat, kind) if kind else None


def _stats(plane, stats) -> dict:
    return {
        plane.stat_metadata[s.metadata_id].name: _stat_value(plane, s)
        for s in stats
        if s.metadata_id in plane.stat_metadata
    }


def _op_of(meta) -> tuple[str, str] | None:
    """``(node name, op type)`` of a TF op event (named ``node:Type``), else None."""
    op_type = meta.display_name
    if op_type and meta.name.endswith(":" + op_type) and "::" not in op_type:
        return meta.name[: -len(op_type) - 1], op_type
    return None


def _self_times(events: list[tuple[int, int, object]]) -> Iterable[tuple[object, int]]:
    """Self time of nested intervals on one thread: ``(start, duration, key)`` in."""
    events.sort(key=lambda e: (e[0], -e[1]))
    stack: list[list] = []  # [end, key, self]
    for start, dur, key in events:
        while stack and stack[-1][0] <= start:
            end, k, own = stack.pop()
            yield k, own
        if stack:
            stack[-1][2] -= min(dur, stack[-1][0] - start)
        stack.append([start + dur, key, dur])
    while stack:
        _, k, own = stack.pop()
        yield k, own


def _add(table: dict[str, OpTime], name: str, op_type: str, where: str, ps: int) -> None:
    op = table.get(name)
    if op is None:
        op = table[name] = OpTime(name, op_type, where)
    op.calls += 1
    op.self_ps += max(ps, 0)


def _union_ps(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, -1
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def graph_dtypes(tf_function) -> dict[str, int]:
    """Op name -> DataType enum of its first floating output (or input) in a tf.function.

    The trace names ops by graph node, so this fills in the precision of ops the
    allocator did not tag. Best effort: an unknown TensorFlow internal gives ``{}``.
    """
    found: dict[str, int] = {}
    try:
        functions = tf_function._list_all_concrete_functions()
    except Exception as e:  # a private API: degrade to the allocator's tags only
        log.warning("cannot list the concrete functions for op dtypes (%s)", e)
        return found
    for concrete in functions:
        graphs = [concrete.graph]
        graphs += [
            f.graph
            for f in getattr(concrete.graph, "_functions", {}).values()
            if hasattr(f, "graph")
        ]
        for graph in graphs:
            for op in graph.get_operations():
                tensors = list(op.outputs) or list(op.inputs)
                floats = [t.dtype for t in tensors if t.dtype.is_floating]
                dtypes = floats or [t.dtype for t in tensors]
                if dtypes:
                    found.setdefault(op.name, dtypes[0].as_datatype_enum)
    return found


def summarize_xspace(spaces: Sequence, dtypes: dict[str, int] | None = None) -> TraceSummary:
    """Reduces XSpaces (one per host) to op times, device busy time and collectives.

    Args:
        spaces: XSpace messages.
        dtypes: Op name -> DataType from the graph, for ops the trace does not tag.
    """
    out = TraceSummary()
    first, last = None, None
    for space in spaces:
        for plane in space.planes:
            if plane.name.startswith("/host:"):
                first, last = _read_host_plane(plane, out, first, last)
            elif plane.name.startswith("/device:") and not plane.name.startswith("/device:CUSTOM"):
                _read_device_plane(plane, out)
    out.span_ps = (last - first) if first is not None else 0
    for name, dtype in (dtypes or {}).items():
        out.dtypes.setdefault(name, dtype)
    for table in (out.host_ops, out.device_ops, out.input_ops):
        for op in table.values():
            op.dtype = out.dtypes.get(op.name)
    return out


def _read_host_plane(plane, out: TraceSummary, first, last):
    for line in plane.lines:
        base = line.timestamp_ns * 1000
        is_input = line.name.startswith("tf_data")
        events = []  # ops and tf.data stages, nested together so each gets its self time
        for ev in line.events:
            start = base + ev.offset_ps
            first = start if first is None else min(first, start)
            last = max(last or 0, start + ev.duration_ps)
            meta = plane.event_metadata.get(ev.metadata_id)
            if meta is None:
                continue
            if meta.name == "MemoryAllocation":
                # The allocator tags each output buffer with its op and dtype:
                # the trace's own record of an op's precision.
                stats = _stats(plane, ev.stats)
                op, dtype = stats.get("tf_op"), stats.get("data_type")
                if op and dtype:
                    out.dtypes.setdefault(str(op), int(dtype))
                continue
            parsed = _op_of(meta)
            if parsed is not None:
                events.append((start, ev.duration_ps, parsed))
            elif is_input and meta.display_name.startswith("Iterator::"):
                # Producer threads only: on the consumer thread a stage's time is
                # mostly waiting for the buffer, a symptom rather than work.
                events.append((start, ev.duration_ps, meta.display_name))
        for key, own in _self_times(events):
            if isinstance(key, str):
                out.input_stages[key] = out.input_stages.get(key, 0) + max(own, 0)
                continue
            name, op_type = key
            table = out.input_ops if is_input else out.host_ops
            _add(table, name, op_type, "input" if is_input else "host", own)
            if not is_input and _COLLECTIVE.search(op_type):
                out.collective_ps += max(own, 0)
    return first, last


def _read_device_plane(plane, out: TraceSummary) -> None:
    out.device_planes.append(plane.name)
    busy = []
    for line in plane.lines:
        base = line.timestamp_ns * 1000
        for ev in line.events:
            meta = plane.event_metadata.get(ev.metadata_id)
            kernel = meta.name if meta is not None else ""
            if _MEMCPY.match(kernel) or "memcpy" in line.name.lower():
                continue
            start = base + ev.offset_ps
            busy.append((start, start + ev.duration_ps))
            stats = _stats(plane, ev.stats)
            tf_op = str(stats.get("tf_op") or stats.get("level 0") or "")
            name, _, op_type = tf_op.rpartition(":")
            if not name:
                name, op_type = tf_op or kernel, "kernel"
            _add(out.device_ops, name, op_type, "device", ev.duration_ps)
            if _DEVICE_COLLECTIVE.search(kernel) or _COLLECTIVE.search(op_type):
                out.device_collective_ps += ev.duration_ps
    out.device_busy_ps.append(_union_ps(busy))
