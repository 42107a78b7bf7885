"""Peak memory of training on a tfds split streamed vs its size (make bench-tfds-memory).

Two tfds datasets of incompressible images (random-noise PNGs, ``bench/noise_tfds``),
one twice the other's size, each trained 30 steps by the image task with
``--cache-max-mb 0`` (streamed) and with the split decoded into memory (cached), in
alternation. A streamed run's peak RSS should not grow with the dataset (ratio ≈ 1);
before streaming, the trainer read every encoded image into memory (measured with
this dataset: 1,257 → 1,498 MB for 182 → 359 MB on disk).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Only the dataset's package goes on the path (bench/ itself has a copy.py).
PKGS = Path(tempfile.mkdtemp(prefix="noise-tfds-"))
(PKGS / "noise_tfds").symlink_to(Path(__file__).resolve().parent / "noise_tfds")


def prepare(data_dir: Path, n: int) -> None:
    code = "import noise_tfds; noise_tfds.NoiseImages(data_dir=%r).download_and_prepare()"
    subprocess.run(
        [sys.executable, "-c", code % str(data_dir)],
        check=True,
        cwd=PKGS,
        env={**os.environ, "NOISE_N": str(n), "PYTHONPATH": str(PKGS)},
        capture_output=True,
    )


def peak_rss_mb(data_dir: Path, out: Path, cache_mb: int) -> float:
    argv = [
        "--dataset",
        "noise_images",
        "--data-dir",
        str(data_dir),
        "--backbone",
        "small_cnn",
        "--weights",
        "none",
        "--image-size",
        "32",
        "--train-steps",
        "30",
        "--batch-size-per-replica",
        "32",
        "--cache-max-mb",
        str(cache_mb),
        "--no-supervisor",
        "--threads",
        "1",
        "--checkpoint-dir",
        f"{out}/c",
        "--model-dir",
        f"{out}/m",
    ]
    code = (
        "import sys, noise_tfds\nfrom spottrain.trainer import attempt\n"
        f"sys.exit(attempt.run({json.dumps(argv)}))"
    )
    # A fresh process per run; RUSAGE_CHILDREN's peak would mix runs, so wait4's own.
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={
            **os.environ,
            "PYTHONPATH": f"{REPO}:{PKGS}",
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "CUDA_VISIBLE_DEVICES": "",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"training failed on {data_dir} (cache {cache_mb} MB)")
    return usage.ru_maxrss / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=2400, help="of the smaller dataset")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sizes = {"1x": args.examples, "2x": 2 * args.examples}
        for name, n in sizes.items():
            prepare(tmp / name, n)
        rss = {(name, mode): [] for name in sizes for mode in ("streamed", "cached")}
        for r in range(args.repeats):
            for name in sizes:
                for mode, cache in (("streamed", 0), ("cached", 4096)):
                    rss[name, mode].append(
                        peak_rss_mb(tmp / name, tmp / f"o{r}{name}{mode}", cache)
                    )
        med = {k: statistics.median(v) for k, v in rss.items()}
        for name, n in sizes.items():
            disk = sum(f.stat().st_size for f in (tmp / name).rglob("*.tfrecord*")) / 2**20
            print(
                f"{name}: {n} images, {disk:.0f} MB on disk: peak RSS streamed "
                f"{med[name, 'streamed']:.0f} MB, cached {med[name, 'cached']:.0f} MB"
            )
        print(
            f"streamed 2x / 1x: {med['2x', 'streamed'] / med['1x', 'streamed']:.3f}; "
            f"cached 2x / 1x: {med['2x', 'cached'] / med['1x', 'cached']:.3f} "
            f"(load average {os.getloadavg()[0]:.1f})"
        )


if __name__ == "__main__":
    main()
