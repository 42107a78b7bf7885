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

from spottrain import storage

# scikit-learn ships the digits but is a test/dev dependency (``spottrain[test]``), not
# one of the image's: the trainer image can run everything here except this writer.
MISSING_DEPENDENCY = 69  # sysexits EX_UNAVAILABLE: a support program is missing


class MissingDependency(RuntimeError):
    """A package this tool needs is not installed; the message says which and how."""


def write_digits(out_dir: str, limit: int = 0) -> int:
    """Writes the digits as PNGs (idempotent: existing files are kept); returns the count.

    Raises:
        MissingDependency: scikit-learn is not installed.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise MissingDependency(
            "scikit-learn is not installed (it ships the digits): pip install 'spottrain[test]'"
        ) from None
    import numpy as np
    import tensorflow as tf

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


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage block), exit 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    p = _Parser(prog="python -m spottrain.datasets", description=__doc__.splitlines()[0])
    p.add_argument("name", choices=["digits"])
    p.add_argument("out_dir")
    p.add_argument("--limit", type=int, default=0, help="Write only the first N images.")
    args = p.parse_args(argv)
    # One line and exit 2 (a usage error) before TensorFlow is imported.
    problem = ""
    if args.limit < 0:
        problem = f"--limit {args.limit} must be >= 0 (0: all images)"
    elif blocked := storage.folder_problem(args.out_dir):
        problem = f"out_dir {args.out_dir!r}: {blocked}"
    if problem:
        print(f"{p.prog}: error: {problem}", file=sys.stderr)
        return 2
    try:
        n = write_digits(args.out_dir, args.limit)
    except MissingDependency as err:
        print(f"{p.prog}: error: {err}", file=sys.stderr)
        return MISSING_DEPENDENCY
    except OSError as err:  # read-only, full, or a file system that refuses new files
        where = err.filename or args.out_dir
        print(f"{p.prog}: error: cannot write {where!r}: {err.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {n} digits images to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
