"""The copy itself: ``copy()``, and the job that decides each file and hands it to a writer."""

from __future__ import annotations

import concurrent.futures
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from spottrain.copier.checksums import _file_crc32c
from spottrain.copier.failures import _Corrupt, _Fatal, _is_permission, _is_transient, _one_line
from spottrain.copier.gcs_io import SLICED_DOWNLOAD_THRESHOLD, _GcsIO
from spottrain.copier.listing import _Listing
from spottrain.copier.local_files import _LocalWriter, _unsafe_local_name
from spottrain.copier.locations import _Entry, _Loc, _parse
from spottrain.copier.progress import _Progress
from spottrain.copier.results import EXIT_FAILED, EXIT_USAGE, CopyError, CopySummary, _human
from spottrain.storage import StorageError, default_client

if TYPE_CHECKING:
    from google.cloud import storage

# One logger for the whole package, named after it, so that configuring
# ``spottrain.copier`` covers every module.
log = logging.getLogger(__package__)
# The closing summary line has a logger of its own: the CLI prints it to stdout
# instead, so it silences this one.
summary_log = logging.getLogger(__package__ + ".summary")

# Parallel transfers. Against real GCS a many-file copy is bound by round trips
# (tens of ms each), not bandwidth; bench/copy.py (docs/benchmarks.md) measured
# 200 x 100 KB through a 20 and 50 ms RTT proxy at 8/16/32/64 workers: at 50 ms
# 32 was 2.1-2.6x faster than 8, and 64 only 6-9 % faster than 32 for twice the
# threads and connections (at 20 ms within the spread).
# The component's `workers` default (components/gcs_copy) is the same value.
DEFAULT_WORKERS = 32
DEFAULT_RETRIES = 5

_CKPT_WORD = re.compile(r"checkpoint|ckpt", re.IGNORECASE)

T = TypeVar("T")


def copy(
    src: str,
    dst: str,
    *,
    no_clobber: bool | None = None,
    workers: int = DEFAULT_WORKERS,
    dry_run: bool = False,
    allow_empty: bool = False,
    client: storage.Client | None = None,
    progress: str = "auto",
    retries: int = DEFAULT_RETRIES,
    retry_delay: float = 0.5,
    sliced_download_threshold: int = SLICED_DOWNLOAD_THRESHOLD,
    follow_symlinks: bool = False,
) -> CopySummary:
    """Copies the file/directory or GCS object/prefix ``src`` to ``dst``.

    See the ``spottrain.copier`` package docstring for the exact rules.

    Args:
        src: ``gs://bucket[/prefix]`` or a local path.
        dst: ``gs://bucket[/prefix]`` or a local path.
        no_clobber: never overwrite a differing destination file; None decides
            by the checkpoint rule in the package docstring.
        workers: parallel transfers (threads).
        dry_run: compare and report, write nothing.
        allow_empty: an empty source directory/prefix copies nothing instead of
            raising. (A missing GCS prefix and an empty one look the same.)
        client: the GCS client; default: anonymous when
            ``STORAGE_EMULATOR_HOST`` is set, else application default
            credentials.
        progress: ``"bar"``, ``"log"`` (a log line every 10 s), ``"off"``, or
            ``"auto"``: a bar when stderr is a terminal, else log lines.
        retries: retries per request for transient errors.
        retry_delay: first backoff in seconds; doubles per retry, up to 30 s.
        follow_symlinks: copy what symlinks that leave a local source point to
            (refused by default; links inside the source are always followed).
        sliced_download_threshold: objects at least this big are downloaded in
            parallel ranges by ``transfer_manager.download_chunks_concurrently``.

    Returns:
        The summary; refused files are in it, they do not raise.

    Raises:
        CopyError: bad input (``exit_code`` 2) before anything was written, a
            permission error, or files that failed after retries (``exit_code``
            1, with ``summary``).
    """
    started = time.monotonic()
    if workers < 1:
        raise CopyError(f"workers must be at least 1, got {workers}")
    if retries < 0:
        raise CopyError(f"retries must be at least 0, got {retries}")
    if not (0 <= retry_delay <= 3600):
        raise CopyError(f"retry_delay must be a number of seconds in 0..3600, got {retry_delay}")
    if progress not in ("auto", "bar", "log", "off"):
        raise CopyError(f"progress must be auto, bar, log or off, got {progress!r}")
    src_loc, dst_loc = _parse(src, "source"), _parse(dst, "destination")
    own_client = client is None and (src_loc.is_gcs or dst_loc.is_gcs)
    if own_client:
        try:
            client = default_client(connections=workers)
        except StorageError as e:
            raise CopyError(str(e)) from e
    job = _Copy(
        src_loc,
        dst_loc,
        client=client,
        workers=workers,
        dry_run=dry_run,
        retries=retries,
        retry_delay=retry_delay,
        sliced_threshold=sliced_download_threshold,
        follow_symlinks=follow_symlinks,
    )
    try:
        summary = job.run(no_clobber=no_clobber, allow_empty=allow_empty, progress=progress)
    finally:
        if own_client:
            client.close()
    summary.seconds = time.monotonic() - started
    summary_log.info("%s", summary)
    if job.fatal is not None:
        raise CopyError(job.fatal, exit_code=EXIT_USAGE, summary=summary)
    if summary.failed:
        raise CopyError(
            f"{len(summary.failed)} file(s) failed, first: {summary.failed[0]}",
            exit_code=EXIT_FAILED,
            summary=summary,
        )
    return summary


class _Copy(_Listing, _GcsIO, _LocalWriter):
    """One copy run: listing, planning and the per-file work on a thread pool.

    Listing (``_Listing``) and the writers to GCS (``_GcsIO``) and to local disk
    (``_LocalWriter``) live in their own modules; this class holds the run's state
    and decides what happens to each file.
    """

    def __init__(
        self,
        src: _Loc,
        dst: _Loc,
        *,
        client: storage.Client | None,
        workers: int,
        dry_run: bool,
        retries: int,
        retry_delay: float,
        sliced_threshold: int,
        follow_symlinks: bool = False,
    ):
        self.src, self.dst = src, dst
        self.client = client
        self.workers = workers
        self.dry_run = dry_run
        self.retries = retries
        self.retry_delay = retry_delay
        self.sliced_threshold = sliced_threshold
        self.follow_symlinks = follow_symlinks
        self.summary = CopySummary(dry_run=dry_run)
        self.fatal: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.no_clobber = False
        self.single = False
        # Set by _resolve: dst root (a prefix or directory) and what is there.
        self.dst_root = ""
        self.existing: dict[str, _Entry] = {}
        self._dst_dirs_made: set[str] = set()
        self._dst_real_root = ""

    # -- retrying -------------------------------------------------------------------

    def _retrying(self, fn: Callable[[], T], what: str) -> T:
        """Calls ``fn``, retrying transient errors with backoff and full jitter."""
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except Exception as exc:
                if attempt >= self.retries or not _is_transient(exc) or self._stop.is_set():
                    raise
                delay = random.uniform(0.5, 1.0) * min(30.0, self.retry_delay * 2**attempt)
                level = logging.WARNING if isinstance(exc, _Corrupt) else logging.INFO
                log.log(
                    level,
                    "retrying %s in %.2f s (attempt %d of %d): %s",
                    what,
                    delay,
                    attempt + 2,
                    self.retries + 1,
                    _one_line(exc),
                )
                time.sleep(delay)
        raise AssertionError("unreachable")

    # -- deciding -------------------------------------------------------------------

    def _decide_no_clobber(
        self, requested: bool | None, sources: dict[str, _Entry]
    ) -> tuple[bool, str]:
        if requested is not None:
            return requested, "--no-clobber" if requested else "--clobber"
        dst = self.dst
        parts = [dst.bucket or "", *dst.path.split("/")] if dst.is_gcs else dst.path.split(os.sep)
        for part in parts:
            if _CKPT_WORD.search(part):
                return True, f"destination path component {part!r} names a checkpoint"
        for rel in (*sources, *self.existing):
            if rel == "checkpoint" or rel.endswith("/checkpoint"):
                return True, f"a 'checkpoint' index file ({rel}) is in the source or destination"
        return False, "destination does not look like a checkpoint directory"

    def run(self, *, no_clobber: bool | None, allow_empty: bool, progress: str) -> CopySummary:
        sources = self._resolve(allow_empty)
        self.no_clobber, why = self._decide_no_clobber(no_clobber, sources)
        self.summary.no_clobber = self.no_clobber
        log.info(
            "copying %d files (%s) from %s to %s; no-clobber %s (%s)",
            len(sources),
            _human(sum(e.size for e in sources.values())),
            self.src.url(),
            self.dst.url(),
            "on" if self.no_clobber else "off",
            why,
        )
        # Biggest first: a large file started last would run alone at the end.
        order = sorted(sources.values(), key=lambda e: (-e.size, e.rel))
        bar = _Progress(len(order), sum(e.size for e in order), progress)
        # Decisions that need no I/O (names, sizes, known checksums) are
        # made here; only files to hash or to copy go to the pool. An unchanged
        # tree then costs listing time only.
        todo = []
        for entry in order:
            decision = self._decide(entry, hash_files=False)
            if decision is None or decision[0] == "copy" and not self.dry_run:
                todo.append(entry)
            else:
                self._record("copied" if decision[0] == "copy" else decision[0], entry, decision[1])
                bar.advance(entry.size)
        pool = concurrent.futures.ThreadPoolExecutor(self.workers, thread_name_prefix="copy")
        try:
            futures = [pool.submit(self._one, entry, bar) for entry in todo]
            for future in concurrent.futures.as_completed(futures):
                future.result()  # _one records its errors; this re-raises only bugs
        except BaseException:
            self._stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=True)
            bar.close()
        return self.summary

    # -- one file -------------------------------------------------------------------

    def _src_url(self, entry: _Entry) -> str:
        if self.single:
            return self.src.url()
        if self.src.is_gcs:
            return self.src.url(self.src.dir_prefix + entry.rel)
        return os.path.join(self.src.path, *entry.rel.split("/"))

    def _dst_url(self, entry: _Entry) -> str:
        if self.dst.is_gcs:
            return self.dst.url(self.dst_root + entry.rel)
        return os.path.join(self.dst_root, *entry.rel.split("/"))

    def _record(self, kind: str, entry: _Entry, detail: str = "") -> None:
        with self._lock:
            s = self.summary
            if kind == "copied":
                s.files_copied += 1
                s.bytes_copied += entry.size
                if self.dry_run:
                    s.planned.append(f"{self._src_url(entry)} -> {self._dst_url(entry)}")
            elif kind == "skipped":
                s.files_skipped += 1
            elif kind == "refused":
                s.files_refused += 1
                s.refused.append(f"{self._dst_url(entry)}: {detail}")
                log.warning("refused %s: %s", self._dst_url(entry), detail)
            else:
                s.failed.append(f"{self._dst_url(entry)}: {detail}")
                log.error("failed %s: %s", self._dst_url(entry), detail)

    def _one(self, entry: _Entry, bar: _Progress) -> None:
        """Decides and does one file; records the outcome, never raises for it."""
        if self._stop.is_set():
            return
        try:
            outcome, detail = self._one_inner(entry)
        except _Fatal as exc:
            outcome, detail = "failed", str(exc)
            with self._lock:
                if self.fatal is None:
                    self.fatal = str(exc)
            self._stop.set()
        except Exception as exc:
            if _is_permission(exc):
                if isinstance(exc, PermissionError):
                    message = f"permission denied: {exc.filename or self._dst_url(entry)}"
                else:
                    message = (
                        f"permission denied copying {self._src_url(entry)} to "
                        f"{self._dst_url(entry)}: {_one_line(exc)}"
                    )
                with self._lock:
                    if self.fatal is None:
                        self.fatal = message
                self._stop.set()
            outcome, detail = "failed", _one_line(exc)
        self._record(outcome, entry, detail)
        bar.advance(entry.size)

    def _local_crc(
        self, path: str, entry: _Entry, *, hash_files: bool, real_root: str | None = None
    ) -> str | None:
        """CRC32C of a local file: known or (if allowed) computed."""
        if entry.crc32c is None and hash_files:
            entry.crc32c = _file_crc32c(path, real_root=real_root)
        return entry.crc32c

    def _decide(self, entry: _Entry, *, hash_files: bool) -> tuple[str, str] | None:
        """("copy" | "skipped" | "refused" | "failed", detail) for one file.

        Returns None when the answer needs a file hashed and ``hash_files`` is off.
        """
        if not self.dst.is_gcs:
            unsafe = _unsafe_local_name(entry.rel)
            if unsafe:
                return "refused", f"unsafe name {entry.rel!r} ({unsafe})"
        if self.src.is_gcs and not entry.crc32c:
            return "failed", f"no CRC32C reported for {self._src_url(entry)}"
        existing = self.existing.get(entry.rel)
        if existing is None:
            return "copy", ""
        if existing.unusable:  # a link out of DST or a FIFO: never read, written or replaced
            return "refused", existing.unusable
        differs = (
            f"exists and differs from {self._src_url(entry)} "
            f"({existing.size} vs {entry.size} bytes), no-clobber"
        )
        if existing.size == entry.size:
            src_crc = entry.crc32c or self._local_crc(
                self._src_url(entry), entry, hash_files=hash_files
            )
            dst_crc = existing.crc32c or self._local_crc(
                self._dst_url(entry),
                existing,
                hash_files=hash_files,
                real_root=self._dst_real_root or None,
            )
            if src_crc is None or dst_crc is None:
                return None
            if src_crc == dst_crc:
                return "skipped", ""
        return ("refused", differs) if self.no_clobber else ("copy", "")

    def _one_inner(self, entry: _Entry) -> tuple[str, str]:
        decision = self._decide(entry, hash_files=True)
        assert decision is not None
        if decision[0] != "copy":
            return decision
        if self.dry_run:
            return "copied", ""
        existing = self.existing.get(entry.rel)
        if self.dst.is_gcs:
            if not self.src.is_gcs:
                # Uploads are verified against it. (local->local computes it while
                # reading; a cached value is then checked against that.)
                self._local_crc(self._src_url(entry), entry, hash_files=True)
            return self._to_gcs(entry, existing)
        return self._to_local(entry, self._dst_url(entry), existing is not None)
