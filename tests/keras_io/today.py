"""The fit ports' model and data, as the engine trains them before it reads ``fit()``.

The ports (``harness.FIT_EXAMPLES``, and tests/fit_user/task.py) give what their example passes ``model.fit`` as
``fit()``; until the engine reads it (issue 54), a ``KerasTask`` trains what
``examples()`` gives. ``tests.keras_io.today:<name>`` is the port with ``examples()``
returning its ``fit()``'s ``x``, ``y`` (and ``sample_weight``) and nothing else: the
model and step are checked today, and fit's other arguments (epochs, validation,
callbacks, class_weight) wait for the engine.
"""

from __future__ import annotations

import importlib

from tests.keras_io.harness import FIT_EXAMPLES

# Each port by module:Class: the keras-io ports, and the fit user's (tests/fit_user).
PORTS = {name: f"tests.keras_io.{spec}" for name, spec in FIT_EXAMPLES.items()}
PORTS["fit_user"] = "tests.fit_user.task:Task"
_made: dict[str, type] = {}


def _examples(self):
    args = self.fit()
    data = [args.x, args.y, args.sample_weight]
    while len(data) > 1 and data[-1] is None:
        data.pop()
    return tuple(data) if len(data) > 1 else data[0]


def __getattr__(name: str) -> type:
    if name not in PORTS:
        raise AttributeError(name)
    if name not in _made:
        module, _, cls = PORTS[name].partition(":")
        port = getattr(importlib.import_module(module), cls)
        _made[name] = type(name, (port,), {"examples": _examples, "__module__": __name__})
    return _made[name]
