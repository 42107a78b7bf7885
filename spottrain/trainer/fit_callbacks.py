"""fit's ``callbacks``, as the engine runs them: which, where, and their state across resumes.

Keras calls them through a ``CallbackList`` (``keras/src/backend/tensorflow/trainer.py``,
``TensorFlowTrainer.fit``); so does :mod:`spottrain.trainer.fit_loop`, with fit's logs.

Where they run. Every callback runs on every worker, as under MultiWorkerMirroredStrategy
fit, and sees the same logs there (every number in them is agreed over the workers),
so the decisions that change the model (LearningRateScheduler, ReduceLROnPlateau,
EarlyStopping, a custom callback's) are the same on every worker. Only those that
write files run on the chief alone: ``TensorBoard`` (writing into ``--tensorboard-dir``,
where the engine's scalars are; without it, it is left out with a line) and
``CSVLogger`` (appending on a resumed run). ``ModelCheckpoint`` and
``BackupAndRestore`` are refused: the engine's own saves do their job.

Their state. A resumed run must decide as an uninterrupted one (ReduceLROnPlateau's
``wait``/``best``/``cooldown_counter``, EarlyStopping's ``wait``/``best``/
``best_weights``, History's ``history``). :func:`state` keeps each callback's plain
attributes (numbers, strings, arrays, lists of them), :func:`restore` sets them again
after ``on_train_begin`` (which resets them: ``ReduceLROnPlateau._reset``,
``EarlyStopping.on_train_begin``): those that training changed since then. Objects
(a file, a writer, the model) are not kept.
"""

from __future__ import annotations

import base64
import io
import logging

from spottrain.exits import ConfigError

log = logging.getLogger("trainer")

# Refused, with what does their job instead.
REFUSED = {
    "ModelCheckpoint": "the engine saves checkpoints itself (--save-every-steps, "
    "--save-every-seconds, on every preemption notice) and exports the model to --model-dir",
    "BackupAndRestore": "the engine saves on every preemption notice and resumes exactly "
    "from --checkpoint-dir",
}
# Attributes never kept: the objects a callback is given.
_SKIP = {"model", "_model", "params", "validation_data", "_supports_tf_logs"}


def build(callbacks, model, *, is_chief: bool, tensorboard_dir: str, resumed: bool, params):
    """The ``keras.callbacks.CallbackList`` this worker runs (with a History, as fit adds)."""
    import keras

    kept = []
    for cb in callbacks or []:
        name = type(cb).__name__
        for refused, instead in REFUSED.items():
            if isinstance(cb, getattr(keras.callbacks, refused)):
                raise ConfigError(f"FitArgs.callbacks: {name} is refused: {instead}")
        if not isinstance(cb, keras.callbacks.Callback):
            raise ConfigError(
                f"FitArgs.callbacks: {cb!r} is not a keras.callbacks.Callback, as fit takes"
            )
        if isinstance(cb, keras.callbacks.TensorBoard):
            if not tensorboard_dir:
                log.warning("FitArgs.callbacks: TensorBoard runs only with --tensorboard-dir")
                continue
            if cb.log_dir != tensorboard_dir:
                log.info("TensorBoard callback: writes into --tensorboard-dir %s", tensorboard_dir)
            cb.log_dir = tensorboard_dir
            _set_dirs(cb)
        if isinstance(cb, keras.callbacks.CSVLogger) and resumed:
            cb.append = True  # the epochs before this attempt's are in the file
        if not is_chief and isinstance(cb, keras.callbacks.TensorBoard | keras.callbacks.CSVLogger):
            continue
        kept.append(cb)
    return keras.callbacks.CallbackList(
        kept, add_history=True, add_progbar=False, model=model, verbose=0, **params
    )


def failure(callbacks, hook: str, error: Exception) -> ConfigError:
    """One line for a callback that raised in ``hook``: which one, from its traceback."""
    mine = {id(cb): cb for cb in callbacks.callbacks}
    which, tb = None, error.__traceback__
    while tb is not None:  # the innermost frame whose self is one of the callbacks
        owner = tb.tb_frame.f_locals.get("self")
        which = type(owner).__name__ if id(owner) in mine else which
        tb = tb.tb_next
    first = (str(error).strip().splitlines() or [""])[0][:200]
    return ConfigError(
        f"FitArgs.callbacks: {which or 'a callback'}.{hook} raised {type(error).__name__}: {first}"
    )


def _set_dirs(cb) -> None:
    """TensorBoard's train/validation dirs follow its log_dir (set in its __init__)."""
    import os

    cb._log_write_dir = cb.log_dir
    cb._train_dir = os.path.join(cb._log_write_dir, "train")
    cb._val_dir = os.path.join(cb._log_write_dir, "validation")


def state(callbacks, since: list[dict] | None = None) -> list[dict]:
    """Each callback's plain attributes, in the list's order (JSON-ready).

    With ``since`` (:func:`state` just after ``on_train_begin``), only those training
    changed: what a worker set up for itself (a CSVLogger's or a user callback's path,
    named after the worker) is not the chief's to restore, and every worker restores
    the chief's checkpoint.
    """
    now = [
        {k: _encode(v) for k, v in vars(cb).items() if k not in _SKIP and _plain(v)}
        for cb in callbacks.callbacks
    ]
    if since is None:
        return now
    return [
        {k: v for k, v in attrs.items() if k not in before or before[k] != v}
        for attrs, before in zip(now, since, strict=True)
    ]


def restore(callbacks, saved: list[dict]) -> None:
    """Sets the attributes :func:`state` kept (after ``on_train_begin``)."""
    for cb, attrs in zip(callbacks.callbacks, saved or [], strict=False):
        for k, v in attrs.items():
            setattr(cb, k, _decode(v))


def _plain(value, depth: int = 0) -> bool:
    import numpy as np

    if value is None or isinstance(value, bool | int | float | str | np.generic | np.ndarray):
        return True
    if depth < 3 and isinstance(value, list | tuple):
        return all(_plain(v, depth + 1) for v in value)
    if depth < 3 and isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


def _encode(value):
    import numpy as np

    if isinstance(value, np.ndarray | np.generic):
        # A NumPy scalar stays one (its dtype too): EarlyStopping's best_weights holds
        # the 0-d weights model.get_weights() gives, and set_weights needs their shape.
        buf = io.BytesIO()
        np.save(buf, np.asarray(value), allow_pickle=False)
        key = "__ndarray__" if isinstance(value, np.ndarray) else "__generic__"
        return {key: base64.b64encode(buf.getvalue()).decode()}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _decode(value):
    import numpy as np

    if isinstance(value, dict) and "__ndarray__" in value:
        return np.load(io.BytesIO(base64.b64decode(value["__ndarray__"])), allow_pickle=False)
    if isinstance(value, dict) and "__generic__" in value:
        blob = io.BytesIO(base64.b64decode(value["__generic__"]))
        return np.load(blob, allow_pickle=False)[()]
    if isinstance(value, dict) and "__tuple__" in value:
        return tuple(_decode(v) for v in value["__tuple__"])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    return value
