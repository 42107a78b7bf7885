"""One row of the JobSet launcher's decide table (spottrain/runtime/train_job/decide.py)."""

from __future__ import annotations

from spottrain.runtime.train_job import decide as d


def row(state: str, **kw) -> tuple[d.Seen, d.Memory, d.Settings]:
    """One look, the launcher's memory and its settings, from one flat set of names:
    ``<line>_said=True`` is a line said, ``can_fall_back=True`` a move left,
    ``can_return=True`` an on-demand gang a move made (spot to go back to),
    ``evictions_said=(("Preempted", 1),)`` Kueue's evictions said."""
    settings = {k: kw.pop(k) for k in list(kw) if k in d.Settings.__dataclass_fields__}
    restarts_said = kw.pop("restarts_said", 0)
    evictions_said = kw.pop("evictions_said", ())
    said = frozenset(k[: -len("_said")] for k in list(kw) if k.endswith("_said") and kw.pop(k))
    memory = d.Memory(
        said=said,
        restarts_said=restarts_said,
        moves_left=int(kw.pop("can_fall_back", False)),
        can_return=kw.pop("can_return", False),
        moved=kw.pop("moved", False),
        evictions_said=evictions_said,
    )
    return d.Seen(state, **kw), memory, d.Settings(**settings)
