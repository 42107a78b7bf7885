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


def task(name: str) -> str:
    return f"tests.keras_io.{name}:Task"


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
