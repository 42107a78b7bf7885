"""The command line: ``python -m spottrain.profiling [options] -- <trainer flags>``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable

from spottrain import fileio, storage
from spottrain.profiling.analysis import DEFAULT_PROFILE_STEPS, DEFAULT_SKIP_STEPS
from spottrain.profiling.findings import DEFAULT_BANDWIDTH_GBPS
from spottrain.profiling.trace import ProfileError
from spottrain.profiling.window import profile
from spottrain.trainer import distribution

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    """The profiler's command line (trainer flags follow ``--``)."""
    p = argparse.ArgumentParser(
        prog="python -m spottrain.profiling",
        description="Profile a short window of the real training and report what limits it.",
        epilog="Example: python -m spottrain.profiling --logdir out/logs --report out/p.md -- "
        "--image-dir out/digits --backbone small_cnn --weights none --image-size 32",
    )
    p.add_argument(
        "--logdir",
        # The Vertex AI job's TensorBoard dir; spottrain.trainer.distribution reads all AIP_* env.
        default=distribution.default_dirs()["tensorboard_dir"],
        help="TensorBoard log dir for the trace (default $AIP_TENSORBOARD_LOG_DIR).",
    )
    p.add_argument("--skip-steps", type=int, default=DEFAULT_SKIP_STEPS)
    p.add_argument("--profile-steps", type=int, default=DEFAULT_PROFILE_STEPS)
    p.add_argument(
        "--bandwidth-gbps",
        type=float,
        default=DEFAULT_BANDWIDTH_GBPS,
        help="Bandwidth between replicas for the AllReduce estimate, Gbit/s.",
    )
    p.add_argument("--report", default="", help="Write the Markdown report here.")
    p.add_argument("--html", default="", help="Write the HTML report here.")
    p.add_argument("--metrics-json", default="", help="Write the metrics as JSON here.")
    p.add_argument(
        "--steps-json",
        default="",
        help="Write each profiled step's number, input wait and step time (ms) as JSON here.",
    )
    p.add_argument(
        "--cloud-profiler",
        action="store_true",
        help="Also start Vertex AI's cloud_profiler plugin (custom jobs with a TensorBoard).",
    )
    p.add_argument("trainer_args", nargs=argparse.REMAINDER)
    return p


def _check_outputs(args: argparse.Namespace) -> str:
    """The first problem with the output paths or window sizes, or ``""``."""
    for flag, steps, least in (
        ("--skip-steps", args.skip_steps, 0),
        ("--profile-steps", args.profile_steps, 1),
    ):
        if steps < least:
            return f"{flag} {steps} must be >= {least}"
    for flag, path in (
        ("--report", args.report),
        ("--html", args.html),
        ("--metrics-json", args.metrics_json),
        ("--steps-json", args.steps_json),
    ):
        if not path or not storage.is_local(path):
            continue
        parent = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            return f"{flag} {path!r} is a folder: give a file name"
        if problem := fileio.unwritable_folder(parent):
            return f"{flag} {path!r}: {problem}"
    if args.logdir and storage.is_local(args.logdir):
        if problem := fileio.unwritable_folder(args.logdir):
            return f"--logdir {args.logdir!r}: {problem}"
    return ""


def step_table(result) -> list[dict]:
    """The profiled steps: ``step`` (as numbered in the trace's step markers), ms each."""
    run = result.analysis.run
    return [
        {"step": run.skip_steps + 1 + i, "input_ms": 1000 * wait, "step_ms": 1000 * total}
        for i, (wait, total) in enumerate(run.steps)
    ]


def main(argv: list[str] | None = None, print_fn: Callable[[str], None] = print) -> int:
    """CLI entry point; returns the exit code (the trainer's codes for its errors)."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    problem = _check_outputs(args)
    if problem:  # before the (minutes-long) profile runs
        print(f"python -m spottrain.profiling: error: {problem}", file=sys.stderr)
        return 2
    trainer_args = args.trainer_args
    if trainer_args and trainer_args[0] == "--":
        trainer_args = trainer_args[1:]
    from spottrain.exits import TrainerExit
    from spottrain.trainer import watchdog

    if watchdog.should_supervise(trainer_args):
        # Like spottrain.trainer.task: a hung MWMS start-up or step stops with exit 171
        # (retryable) and a stack dump instead of holding a GPU node forever.
        own_argv = sys.argv[1:] if argv is None else argv
        cmd = [sys.executable, "-m", "spottrain.profiling", *own_argv]
        relay = watchdog.NoticeRelay().install()  # kept until exit (see Supervisor.run)
        return watchdog.supervise(cmd, trainer_args, name="profile", relay=relay)
    try:
        result = profile(
            trainer_args,
            args.logdir,
            skip_steps=args.skip_steps,
            profile_steps=args.profile_steps,
            bandwidth_gbps=args.bandwidth_gbps,
            cloud_profiler=args.cloud_profiler,
        )
    except TrainerExit as e:
        log.error("exit %d: %s", e.code, e)
        return e.code
    except (ValueError, ProfileError) as e:
        log.error("%s", e)
        return 2
    if not result.is_chief:
        return 0
    for path, text in (
        (args.report, result.markdown),
        (args.html, result.html),
        (args.metrics_json, json.dumps(result.metrics, indent=2, sort_keys=True) + "\n"),
        (args.steps_json, json.dumps(step_table(result), indent=1) + "\n"),
    ):
        if path:
            fileio.write_text(path, text)
    if args.report:
        print_fn(f"profile report: {args.report} (trace: {result.trace_dir})")
    else:
        print_fn(result.markdown)
    return 0
