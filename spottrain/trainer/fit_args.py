"""``model.fit``'s arguments, as a ``KerasTask`` gives them to the engine.

A fit user ports a script by moving the arguments of its ``model.fit(...)`` call,
unchanged, into the task: ``def fit(self): return FitArgs(x_train, y_train,
batch_size=128, epochs=15, validation_split=0.1, callbacks=[...])``. The fields are
``keras.Model.fit``'s parameters in its order, with its defaults
(``keras/src/trainers/trainer.py``, ``Trainer.fit``); a unit test keeps them equal to
the installed Keras's signature.

What the engine does with each (it keeps its own contract: the batch of step *s* a
function of ``(seed, s)``, saves at the same step on every worker, exact resume) is
in docs/task-api.md's table of fit's arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

__all__ = ["FitArgs"]


@dataclass(frozen=True)
class FitArgs:
    """The arguments of one ``model.fit(...)`` call (``keras.Model.fit``'s, by name and order).

    ``batch_size`` is the *global* batch, as fit reads it under a ``tf.distribute``
    strategy. ``verbose`` is accepted and not used: the engine writes its own step and
    epoch lines.
    """

    x: Any = None
    y: Any = None
    batch_size: int | None = None
    epochs: int = 1
    verbose: Any = "auto"
    callbacks: Any = None
    validation_split: float = 0.0
    validation_data: Any = None
    shuffle: bool = True
    class_weight: Any = None
    sample_weight: Any = None
    initial_epoch: int = 0
    steps_per_epoch: int | None = None
    validation_steps: int | None = None
    validation_batch_size: int | None = None
    validation_freq: Any = 1

    def given(self) -> dict[str, Any]:
        """The arguments that differ from fit's defaults, by name (for lines and checks)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not f.default and not _same(value, f.default):
                out[f.name] = value
        return out


def _same(a, b) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:  # noqa: BLE001 - arrays compare elementwise
        return False
