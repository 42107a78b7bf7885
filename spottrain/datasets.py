"""Writes small real datasets as image folders: ``python -m spottrain.datasets digits OUT``.

No dataset downloads are possible in CI, so tests and the local demo train on
scikit-learn's bundled copy of the UCI handwritten digits (1,797 8x8 images,
10 classes), written as ``OUT/<label>/<index>.png``, the same layout as a
user's own image folder.
"""

from __future__ import annotations

import argparse
import os
import sys


def write_digits(out_dir: str, limit: int = 0) -> int:
    """Writes the digits as PNGs (idempotent: existing files are kept); returns the count."""
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.clip(digits.images * (255.0 / 16.0), 0, 255).astype(np.uint8)
    n = len(images) if not limit else min(limit, len(images))
    for i in range(n):
        label_dir = os.path.join(out_dir, str(digits.target[i]))
        path = os.path.join(label_dir, f"{i:04d}.png")
        if os.path.exists(path):
            continue
        os.makedirs(label_dir, exist_ok=True)
        png = tf.io.encode_png(images[i][..., None]).numpy()
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as f:
            f.write(png)
        os.replace(tmp, path)  # never leave a half-written image behind
    return n


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name", choices=["digits"])
    p.add_argument("out_dir")
    p.add_argument("--limit", type=int, default=0, help="Write only the first N images.")
    args = p.parse_args(argv)
    n = write_digits(args.out_dir, args.limit)
    print(f"wrote {n} digits images to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
