"""What the keras-io tests share: the examples, the flags, the exported weights."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

EXAMPLES = [
    "vae",
    "distiller",
    "siamese",
    "text_classification",
    "timeseries",
    "ticket_classifier",
    "conditional_gan",
]
# The ports of issue 54 (their fit() is their example's model.fit call): module:class.
# ``imbalanced_classification:Task`` keeps its ModelCheckpoint, which the engine refuses:
# ``Trained`` is the port without it.
FIT_EXAMPLES = {
    "mnist_convnet": "mnist_convnet:Task",
    "anomaly_autoencoder": "anomaly_autoencoder:Task",
    "imbalanced_classification": "imbalanced_classification:Trained",
    "mlp_mixer": "mlp_mixer:Task",
    "pydataset_guide": "pydataset_guide:Task",
}


def task(name: str) -> str:
    """An example of ``EXAMPLES`` by its name, or a ``module:Class`` task as given."""
    return name if ":" in name else f"tests.keras_io.{name}:Task"


def fit_port(name: str) -> str:
    """A fit port as written (the engine reads its ``fit()``)."""
    return f"tests.keras_io.{FIT_EXAMPLES[name]}"


def engine_args(name: str, out: Path, steps: int, batch: int, *extra: str) -> list[str]:
    """The trainer's flags for one example (no --optimizer: the compiled one trains)."""
    return [
        "--task", task(name), "--train-steps", str(steps),
        "--batch-size-per-replica", str(batch), "--save-every-steps", "100",
        "--threads", "1", "--checkpoint-dir", str(out / "checkpoints"),
        "--model-dir", str(out / "model"), *extra,
    ]  # fmt: skip


def exported_weights(model_dir: Path) -> dict:
    """Every weight array the export wrote (from model.keras, else model.weights.h5), by path."""
    import h5py
    import numpy as np

    if (model_dir / "model.keras").exists():
        with zipfile.ZipFile(model_dir / "model.keras") as z:
            blob = io.BytesIO(z.read("model.weights.h5"))
    else:
        blob = io.BytesIO((model_dir / "model.weights.h5").read_bytes())
    found = {}
    with h5py.File(blob, "r") as f:
        f.visititems(
            lambda path, item: (
                found.__setitem__(path, np.array(item)) if isinstance(item, h5py.Dataset) else None
            )
        )
    return found
