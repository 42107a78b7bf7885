"""The command line: ``python -m spottrain.copier`` and the ``spottrain-copy`` script."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading

from spottrain.copier.planner import DEFAULT_RETRIES, DEFAULT_WORKERS, copy, summary_log
from spottrain.copier.results import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    CopyError,
    CopySummary,
)

_EPILOG = """\
no-clobber default: on when DST looks like a checkpoint directory (a component of
its path contains 'checkpoint' or 'ckpt', or a file named 'checkpoint' is in SRC or
DST); then a differing destination file is refused, never overwritten.

exit codes:
  0    everything copied or already identical (or refused, with --allow-refused)
  1    files refused (no-clobber, unsafe names, a symlink out of DST or a FIFO at a
       file's path) or failed (checksum, retries)
  2    bad input or setup: missing source or bucket, empty source, destination
       not a directory, overlapping SRC/DST, a symlink leaving SRC, a non-UTF-8
       name in an upload (nothing written), permission denied
  69   the storage endpoint stayed unreachable through the retries
  130  interrupted
"""


def main(argv: list[str] | None = None) -> int:
    """Runs the CLI; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m spottrain.copier",
        description=(
            "Idempotent, verified, parallel copy of a directory or GCS prefix "
            "(gs://bucket/prefix or local path, either side)."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("src", metavar="SRC", help="gs://bucket[/prefix] or local path")
    parser.add_argument("dst", metavar="DST", help="gs://bucket[/prefix] or local path")
    clobber = parser.add_mutually_exclusive_group()
    clobber.add_argument(
        "--no-clobber",
        dest="no_clobber",
        action="store_const",
        const=True,
        default=None,
        help="never overwrite a differing destination file (default: auto, see below)",
    )
    clobber.add_argument(
        "--clobber",
        dest="no_clobber",
        action="store_const",
        const=False,
        help="overwrite differing destination files",
    )
    parser.add_argument(
        "-j",
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        help=f"parallel transfers (default {DEFAULT_WORKERS})",
    )
    parser.add_argument("--dry-run", action="store_true", help="list what would be copied")
    parser.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="copy what symlinks leaving a local source point to (refused by default)",
    )
    parser.add_argument(
        "--allow-empty", action="store_true", help="an empty source is not an error"
    )
    parser.add_argument(
        "--allow-refused", action="store_true", help="exit 0 even if files were refused"
    )
    parser.add_argument(
        "--progress",
        choices=("auto", "bar", "log", "off"),
        default="auto",
        help="progress display (default: a bar on a terminal, else a log line every 10 s)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=DEFAULT_RETRIES,
        help=f"retries per request on transient errors (default {DEFAULT_RETRIES})",
    )
    parser.add_argument(
        "--retry-delay",
        type=float,
        default=0.5,
        help="first backoff in seconds, doubled per retry (default 0.5)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("-q", "--quiet", action="store_true", help="print errors only")
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(message)s",
        stream=sys.stderr,
    )
    # Keep the library's own chatter out of the way. (urllib3's "Connection pool is
    # full" warnings do not arise: the copy's client keeps a connection per worker.)
    # Set for this call only: a caller that runs main() in its own process (tests,
    # run-local) keeps its own levels, so its later copies still log their summary.
    quieted = [(logging.getLogger("google"), logging.WARNING), (summary_log, logging.WARNING)]
    before = [(logger, logger.level) for logger, _ in quieted]
    for logger, level in quieted:
        logger.setLevel(level)  # the summary is printed to stdout below instead
    try:
        return _run(args)
    finally:
        for logger, level in before:
            logger.setLevel(level)


def _run(args: argparse.Namespace) -> int:
    """The copy the parsed ``args`` ask for; prints its summary; returns the exit code."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _exit_interrupted)
    try:
        summary = copy(
            args.src,
            args.dst,
            no_clobber=args.no_clobber,
            workers=args.workers,
            dry_run=args.dry_run,
            allow_empty=args.allow_empty,
            progress="off" if args.quiet else args.progress,
            retries=args.retries,
            retry_delay=args.retry_delay,
            follow_symlinks=args.follow_symlinks,
        )
    except CopyError as exc:
        if exc.summary is not None and not args.quiet:
            _print_summary(exc.summary, args.json)
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if summary.dry_run:
        for line in summary.planned:
            print(f"would copy {line}")
    if not args.quiet:
        _print_summary(summary, args.json)
    if summary.files_refused and not args.allow_refused:
        print(
            f"error: {summary.files_refused} file(s) refused, first: {summary.refused[0]}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_OK


def _exit_interrupted(signum: int, frame: object) -> None:
    """Ctrl-C: exits at once with 130, like a kill the copy is built to survive.

    Raising KeyboardInterrupt would make ``copy()`` wait for its worker threads,
    which may sit in a blocking call no signal ends (a stalled network read lasts
    up to the client's 60 s timeout). Temp files left behind are unlocked once the
    process is gone, so the next run removes them; published files are complete.
    """
    with contextlib.suppress(Exception):
        sys.stderr.write(("\n" if sys.stderr.isatty() else "") + "error: interrupted\n")
        sys.stderr.flush()
        sys.stdout.flush()
    os._exit(EXIT_INTERRUPTED)


def _print_summary(summary: CopySummary, as_json: bool) -> None:
    print(json.dumps(summary.to_dict()) if as_json else str(summary), flush=True)
