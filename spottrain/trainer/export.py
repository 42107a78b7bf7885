"""The trained model's files: whatever of them can be written, never a lost run.

A model trains whether or not Keras can serialise it: ``model.save("….keras")``
needs ``get_config()`` for a subclassed model whose constructor takes other models
(Keras 3 ``Model.get_config`` raises ``NotImplementedError``: keras-io's VAE and
distiller), and ``model.export()`` needs a ``call()``. So each form is tried on its
own, written whole or not at all, and what was not written is said in one line,
with why: a finished run always ends with its weights and its summary, and a
retry of it does not crash where it did.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

from spottrain import fileio

log = logging.getLogger("trainer")

KERAS_FILE = "model.keras"
WEIGHTS_FILE = "model.weights.h5"
SAVED_MODEL_DIR = "saved_model"


def _why(error: Exception) -> str:
    text = " ".join(str(error).split())
    text = text if len(text) <= 240 else text[:237] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _file(write, path: str) -> None:
    """Writes one file through a local temp file and one copy: whole or not at all."""
    import tensorflow as tf

    tmp = tempfile.mkdtemp(prefix="spottrain-export-")
    try:
        local = os.path.join(tmp, os.path.basename(path))
        write(local)
        with fileio.naming(path):
            tf.io.gfile.copy(local, path, overwrite=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _saved_model(model, path: str) -> None:
    """``model.export`` into ``path``; a failed one leaves no half-written directory."""
    import keras
    import tensorflow as tf

    if type(model).call is keras.Model.call:  # what export traces; Keras' own error says less
        raise NotImplementedError("the model defines no call() to serve")
    try:
        model.export(path, verbose=False)
    except Exception:
        if tf.io.gfile.exists(path):
            tf.io.gfile.rmtree(path)
        raise


def write(model, model_dir: str) -> dict:
    """Writes ``model.keras``, ``saved_model/`` and, without ``.keras``, the weights.

    A storage failure (a full disk, an unreachable bucket) still raises: it is the
    destination's, and a retry may succeed; any other error skips that form.

    Returns:
        ``{"written": [names], "not_written": {name: why}}``.
    """
    result = {"written": [], "not_written": {}}
    if (
        not model.built
        and model.weights
        and all(layer.built for layer in model._flatten_layers(include_self=False))
    ):
        # Every layer holds its weights, but a model with no call() (keras-io's VAE: its
        # own train_step calls its parts) is never built by a call, and Keras' savers
        # refuse an unbuilt model; Layer.build's default does no more than this.
        model.built = True

    def attempt(name, fn, *args) -> None:
        try:
            fn(*args)
            result["written"].append(name)
        except Exception as e:  # noqa: BLE001 - a form Keras cannot write: the others still go
            if fileio.storage_failure(e) is not None:
                raise
            result["not_written"][name] = _why(e)

    attempt(KERAS_FILE, _file, model.save, f"{model_dir}/{KERAS_FILE}")
    if KERAS_FILE not in result["written"]:
        # .keras holds the weights; without it they go on their own (model.load_weights).
        attempt(WEIGHTS_FILE, _file, model.save_weights, f"{model_dir}/{WEIGHTS_FILE}")
    attempt(f"{SAVED_MODEL_DIR}/", _saved_model, model, f"{model_dir}/{SAVED_MODEL_DIR}")
    return result


def line(result: dict) -> str:
    """One line: what was written, and why not the rest."""
    said = f"wrote {', '.join(result['written']) or 'nothing'}"
    if result["not_written"]:
        why = "; ".join(f"not {name} ({why})" for name, why in result["not_written"].items())
        said += f"; {why}"
    return said
