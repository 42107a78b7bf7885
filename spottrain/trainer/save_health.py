"""Which checkpoints a run can go back to after a NaN stop: each save's loss, on record.

A NaN stop keeps the newest checkpoint, but its weights may already be diverged:
the loss that became NaN was computed from them. A retry with a lower learning
rate that resumes there stops again (issue 29, item 5). So the chief records, in
``saves.json`` beside the checkpoints, every kept save with the loss of the step
after it (the first loss computed from the saved weights). At a NaN stop it marks
as diverged the first save whose next loss was non-finite or rose beyond
``RISE_FACTOR`` times the lowest next loss of the saves before it, and every save
after that one. The next attempt (its settings changed: the same ones stop at
``FATAL.json``) resumes from the newest checkpoint not marked, or from the step
``--resume-from-step`` names; the chief moves the checkpoints it skips into
``quarantine/`` (never deleted), so the run's history is linear again.
"""

from __future__ import annotations

import logging
import math
import time

from spottrain import fileio

log = logging.getLogger(__name__)

HISTORY = "saves.json"
# A diverging loss grows by orders of magnitude within a few steps; ordinary batch
# noise, even late in training, stays well within this factor of its low.
RISE_FACTOR = 10.0
# What a checkpoint skipped for a resume is renamed to in quarantine/.
SKIPPED_SUFFIX = ".skipped"


def _number(loss: float) -> float | str:
    """JSON has no NaN/Inf: non-finite losses are kept as their names."""
    return float(loss) if math.isfinite(loss) else str(float(loss))


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def read(checkpoint_dir: str) -> dict:
    """The history in ``checkpoint_dir`` (empty when there is none or it is unreadable).

    It only advises (which saves diverged, where a rewind went), so a hand-edited or
    foreign file loses its malformed parts with a warning instead of stopping every
    retry (``{"saves": "x"}`` was an AttributeError, exit 1, on each).
    """
    data = fileio.read_json(fileio.join(checkpoint_dir, HISTORY)) if checkpoint_dir else None
    if not isinstance(data, dict):
        return {}
    saves = data.get("saves", [])
    good = [s for s in saves if _is_save(s)] if isinstance(saves, list) else []
    rewound = data.get("rewound")
    bad = (
        (not isinstance(saves, list) or len(good) < len(saves))
        or (rewound is not None and not isinstance(rewound, dict))
        or ("nan_step" in data and not _whole(data["nan_step"]))
    )
    if bad:
        log.warning("%s: malformed entries dropped (it only advises; the checkpoints "
                    "are unchanged)", fileio.join(checkpoint_dir, HISTORY))  # fmt: skip
        data = {"saves": good, **({"rewound": rewound} if isinstance(rewound, dict) else {})}
    return data


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_save(entry) -> bool:
    return isinstance(entry, dict) and _whole(entry.get("step"))


def diverged_steps(history: dict) -> set[int]:
    """The steps of the saves marked diverged at the last NaN stop."""
    return {s["step"] for s in history.get("saves", []) if s.get("diverged")}


def resume_limit(history: dict, resume_from_step: int, fingerprint: str) -> int | None:
    """The newest step this attempt may resume from; ``None``: the newest checkpoint.

    ``--resume-from-step`` applies once per setting: a retry of the run that already
    went back there (the same fingerprint) resumes from its own newest save.
    """
    rewound = history.get("rewound") or {}
    if resume_from_step >= 0 and rewound.get("fingerprint") != fingerprint:
        return resume_from_step
    return None


class SaveHistory:
    """The record of the kept saves and their losses; every worker keeps it, the chief writes."""

    def __init__(self, checkpoint_dir: str, enabled: bool):
        self.dir = checkpoint_dir
        self.path = fileio.join(checkpoint_dir, HISTORY) if checkpoint_dir else ""
        self.enabled = enabled and bool(checkpoint_dir)
        self.data = read(checkpoint_dir)
        self.data.setdefault("saves", [])

    def _write(self) -> None:
        if not self.enabled:
            return
        try:
            fileio.write_json(self.path, self.data)
        except Exception as e:  # noqa: BLE001 - the history must never stop training
            log.warning("could not write the save history %s: %s", self.path, e)

    def resumed(self, step: int, skipped: list[int], rewound: dict | None) -> None:
        """After the restore: drops the entries of checkpoints now in quarantine."""
        if not (skipped or rewound):
            return
        self.data["saves"] = [s for s in self.data["saves"] if s["step"] <= step]
        for entry in self.data["saves"]:
            entry.pop("diverged", None)
        self.data.pop("nan_step", None)
        if rewound:
            self.data["rewound"] = rewound
        self._write()

    def step_loss(self, step: int, loss: float) -> None:
        """Notes the loss of ``step``: the next loss of a save at ``step - 1`` (in memory)."""
        saves = self.data["saves"]
        if saves and saves[-1]["step"] == step - 1:
            saves[-1]["next_loss"] = _number(loss)

    def saved(self, step: int, loss: float, keep: int) -> None:
        """Records a save at ``step`` (written at once), with the ``keep - 1`` before it.

        The checkpoint manager keeps the newest ``keep`` saves; the history is linear
        (a resume from an older save quarantines the newer ones), so these are theirs.
        """
        saves = [s for s in self.data["saves"] if s["step"] < step]
        saves.append({"step": step, "loss": _number(loss), "time": round(time.time(), 2)})
        self.data["saves"] = saves[-keep:]
        self._write()

    def diverged(self, nan_step: int, present: list[int]) -> tuple[list[int], list[int]]:
        """At a NaN stop: marks the diverged saves; returns (healthy, diverged) steps.

        Args:
            nan_step: The step whose loss was non-finite (already passed to step_loss).
            present: The steps of the checkpoints in the dir.
        """
        saves = sorted(
            (s for s in self.data["saves"] if s["step"] in present), key=lambda s: s["step"]
        )
        low, bad = math.inf, None
        for entry in saves:
            nxt = entry.get("next_loss")
            if nxt is not None and (not _finite(nxt) or nxt > RISE_FACTOR * low):
                bad = entry["step"]
                break
            if _finite(nxt):
                low = min(low, nxt)
        diverged = [s for s in present if bad is not None and s >= bad]
        for entry in saves:
            entry["diverged"] = entry["step"] in diverged
        self.data["saves"], self.data["nan_step"] = saves, nan_step
        self._write()
        healthy = sorted(s for s in present if s not in diverged)
        return healthy, sorted(diverged)


def nan_resume_line(healthy: list[int], diverged: list[int]) -> str:
    """What the NaN line says a retry with changed settings resumes from."""
    where = f"step {healthy[-1]}, the newest healthy save" if healthy else "step 0, afresh"
    parts = [f"healthy: {', '.join(map(str, healthy)) or 'none'}"]
    if diverged:
        parts.append(f"diverged: {', '.join(map(str, diverged))}")
    parts.append("another with --resume-from-step N")
    return f"a retry with changed settings resumes from {where} ({'; '.join(parts)})"
