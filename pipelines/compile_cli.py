"""``python -m spottrain.pipelines compile``: the committed YAML, a copy of it, or one custom build.

Kept apart from ``__main__`` (the other subcommands) because its flags are most of
the CLI; imports stay inside the functions so that building the parser is fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from spottrain.version import IMAGE


def add_arguments(c: argparse.ArgumentParser) -> None:
    """The ``compile`` flags."""
    from spottrain.placement import DEFAULT_SPOT_GRACE_SECONDS, RUN_TIMEOUT

    c.add_argument("--image", default=IMAGE, help="container image (default %(default)s)")
    c.add_argument("--check", action="store_true", help="exit 1 if committed YAML is stale")
    c.add_argument(
        "--target", choices=["gke", "gke-job", "gke-fallback", "vertex"], help="one custom build"
    )
    c.add_argument("--out", help="where --target writes")
    c.add_argument(
        "--out-dir",
        help="write every committed file under this folder instead, at its repository path "
        "(the committed YAML is left as it is)",
    )
    c.add_argument("--pool", default="preemptible", help="GKE pool: preemptible|spot|on-demand")
    c.add_argument(
        "--compute-class",
        default="",
        help="select this GKE ComputeClass (`make gke-computeclass`) instead of a pool; "
        "needs --pool spot",
    )
    c.add_argument(
        "--spot-grace",
        type=int,
        default=DEFAULT_SPOT_GRACE_SECONDS,
        help="the spot nodes' shutdown grace (30, GKE's default, or 120 where the pool or "
        "class sets it): the Job pods then ask for 105 s",
    )
    c.add_argument("--gpu-type", default="nvidia-tesla-t4", help="GKE accelerator label value")
    c.add_argument("--gpus", type=int, default=1, help="GPUs per train task / replica")
    c.add_argument("--memory", default="48G", help="train memory limit on GKE")
    c.add_argument("--retries", type=int, default=5, help="train retries")
    c.add_argument("--backoff", default="60s", help="first retry delay")
    c.add_argument(
        "--run-timeout", default=RUN_TIMEOUT, help="the run's deadline (default %(default)s)"
    )
    c.add_argument(
        "--retry-window",
        default="",
        help="how long after the first attempt KFP may retry (default: the run timeout)",
    )
    c.add_argument("--machine-type", default="n1-standard-8", help="Vertex machine type")
    c.add_argument("--accelerator-type", default="NVIDIA_TESLA_T4", help="Vertex accelerator")
    c.add_argument("--replica-count", type=int, default=1, help="Vertex replicas (MWMS)")
    c.add_argument("--worker-gpus", type=int, default=None, help="Vertex pool 1 GPUs override")
    c.add_argument("--strategy", default="SPOT", help="Vertex scheduling strategy")
    c.add_argument("--timeout", default="86400s", help="Vertex job timeout")
    c.add_argument("--no-web-access", action="store_true", help="disable the interactive shell")
    c.add_argument("--network", default="", help="Vertex: VPC network peered with the job")
    c.add_argument(
        "--reserved-ip-range", action="append", default=[], help="Vertex: its range (repeat)"
    )
    c.add_argument("--network-attachment", default="", help="Vertex: PSC interface attachment")
    c.add_argument("--encryption-key", default="", help="Vertex: CMEK key (the job's region)")
    c.add_argument("--reservation", default="", help="Vertex: a specific reservation (STANDARD)")
    c.add_argument(
        "--fallback-strategy",
        default="",
        choices=["", "STANDARD"],
        help="Vertex: continue a failed SPOT job as STANDARD jobs (one task, the run succeeds)",
    )
    c.add_argument("--spot-attempts", type=int, default=3, help="Vertex: SPOT jobs before that")


def add_parser(sub) -> None:
    """Adds the ``compile`` subcommand to the CLI's subparsers."""
    c = sub.add_parser("compile", help="write the committed component and pipeline YAML")
    add_arguments(c)
    c.set_defaults(func=cmd_compile)


def _defaults() -> argparse.Namespace:
    """The flags' defaults, to tell which build flag was given."""
    c = argparse.ArgumentParser()
    add_arguments(c)
    return c.parse_args([])


def _check_out(out: str) -> None:
    """``--out``'s folder must exist and be a folder (checked before compiling)."""
    from spottrain.pipelines.guards import GuardError

    parent = Path(out).parent
    if Path(out).is_dir() or not parent.is_dir():
        if Path(out).is_dir():
            what = "is a folder"
        else:
            state = "is not a folder" if parent.exists() else "does not exist"
            what = f"{str(parent)!r} {state}"
        raise GuardError(f"--out {out!r}: {what}; pass a file path in an existing folder")


def _check_out_dir(args: argparse.Namespace) -> None:
    """``--out-dir`` (the committed set, written elsewhere) before compiling."""
    from spottrain.pipelines import compile as comp
    from spottrain.pipelines.guards import GuardError

    if args.check or args.target:
        flag = "--check" if args.check else "--target"
        raise GuardError(
            f"--out-dir {args.out_dir!r} writes every committed file elsewhere: not with {flag} "
            "(one --target build goes to --out FILE)"
        )
    if problem := comp.out_dir_problem(args.out_dir):
        raise GuardError(f"--out-dir {args.out_dir!r}: {problem}")


def cmd_compile(args: argparse.Namespace) -> int:
    """Writes the committed YAML (or a copy under --out-dir), checks drift, or one custom build."""
    from spottrain import placement
    from spottrain.pipelines import compile as comp
    from spottrain.pipelines import guards
    from spottrain.pipelines.guards import GuardError

    guards.check_image_reference(args.image)
    placement.check_gpu_type(args.gpu_type)
    if args.out_dir is not None:
        _check_out_dir(args)
    if args.out and not args.target:
        raise GuardError(
            f"--out {args.out!r} is only used with --target (without it, compile writes the "
            "committed YAML in place)"
        )
    if not args.target:
        # The committed YAML uses the default placement: a build flag given here
        # would be silently ignored.
        defaults = vars(_defaults())
        for key, value in vars(args).items():
            if key not in ("image", "check", "target", "out", "out_dir", "func", "command"):
                if value != defaults.get(key):
                    flag = "--" + key.replace("_", "-")
                    raise GuardError(
                        f"{flag} {value!r} is only used with --target "
                        "gke|gke-job|gke-fallback|vertex and --out FILE (the committed YAML "
                        "keeps the default placement)"
                    )
    if args.check:
        stale = comp.drift(args.image)
        for path in stale:
            print(f"stale: {path} (run `make compile`)")
        return 1 if stale else 0
    if args.target:
        if not args.out:
            raise GuardError("--target needs --out FILE")
        _check_out(args.out)
        _check_build_flags(args)
        with comp.component_images(args.image):
            func = _custom_pipeline(args, placement, guards)
            text = comp.compile_text(func, args.image)
        try:
            Path(args.out).write_text(text)
        except OSError as e:
            raise GuardError(f"--out {args.out!r} cannot be written: {e.strerror}") from None
        print(f"wrote {args.out}")
        return 0
    guards.check_image_gpu(args.image, placement.Placement().gpu_count)
    if args.out_dir is not None:
        try:
            written = comp.write_all_to(args.out_dir, args.image)
        except OSError as e:
            raise GuardError(
                f"--out-dir {args.out_dir!r} cannot be written: {e.strerror}"
            ) from None
        print(f"wrote {len(written)} file(s) for {args.image} under {args.out_dir}")
        return 0
    changed = comp.write_all(args.image)
    for path in changed:
        print(f"wrote {path}")
    print(f"{len(changed)} file(s) changed" if changed else "compiled YAML is up to date")
    return 0


def _check_build_flags(args: argparse.Namespace) -> None:
    """Flags of one build that it would ignore, or that contradict each other."""
    from spottrain import placement
    from spottrain.pipelines.guards import GuardError

    defaults = _defaults()
    if args.gpus == 0 and args.target != "vertex" and args.gpu_type != defaults.gpu_type:
        raise GuardError(
            f"--gpu-type {args.gpu_type!r} with --gpus 0: a CPU build has no accelerator; "
            "give --gpus 1 or more, or leave out --gpu-type"
        )
    if args.spot_attempts != defaults.spot_attempts and not args.fallback_strategy:
        raise GuardError(
            f"--spot-attempts {args.spot_attempts} is only used with --fallback-strategy "
            "STANDARD (--target vertex)"
        )
    if args.retry_window and args.target != "vertex":
        window, timeout = placement.seconds(args.retry_window), placement.seconds(args.run_timeout)
        if window > timeout:
            raise GuardError(
                f"--retry-window {args.retry_window!r} is longer than --run-timeout "
                f"{args.run_timeout!r}: the run ends at its timeout, so no retry comes after "
                "it; leave out --retry-window (it defaults to the run timeout)"
            )


def _custom_pipeline(args, placement, guards):
    """A pipeline compiled with non-default placement or Vertex job settings."""
    if args.target == "vertex":
        from spottrain.pipelines import vertex

        placement.check_gpu_type(args.accelerator_type, vertex=True)
        settings = vertex.VertexTraining(
            machine_type=args.machine_type,
            accelerator_type=args.accelerator_type,
            accelerator_count=args.gpus,
            replica_count=args.replica_count,
            strategy=args.strategy,
            timeout=args.timeout,
            enable_web_access=not args.no_web_access,
            retries=args.retries,
            worker_accelerator_count=args.worker_gpus,
            network=args.network,
            reserved_ip_ranges=tuple(args.reserved_ip_range),
            network_attachment=args.network_attachment,
            encryption_key=args.encryption_key,
            reservation=args.reservation,
            fallback=args.fallback_strategy,
            spot_attempts=args.spot_attempts,
        )
        guards.check_image_gpu(args.image, settings.gpus)
        return vertex.build(settings)
    from spottrain.pipelines import gke

    train_placement = placement.Placement(
        pool=args.pool,
        gpu_type=args.gpu_type,
        gpu_count=args.gpus,
        memory_limit=args.memory,
        retries=args.retries,
        backoff=args.backoff,
        retry_window=args.retry_window or args.run_timeout,
        compute_class=args.compute_class,
        grace_seconds=placement.pod_grace_seconds(args.spot_grace),
    )
    guards.check_image_gpu(args.image, train_placement.gpu_count)
    if args.spot_grace != placement.DEFAULT_SPOT_GRACE_SECONDS and args.target != "gke-job":
        raise guards.GuardError(
            f"--spot-grace {args.spot_grace} sets the JobSet engine's pod grace: --target gke-job"
        )
    if args.compute_class and args.target != "gke-job":
        raise guards.GuardError(
            f"--compute-class {args.compute_class!r} is for --target gke-job (the JobSet engine; "
            "the class moves pods to on-demand itself, so it needs no fall-back variant)"
        )
    if args.target == "gke-job":
        from spottrain.pipelines import gke_jobset

        return gke_jobset.build(train_placement, run_timeout=args.run_timeout)
    fallback = None
    if args.target == "gke-fallback":
        fallback = placement.ON_DEMAND_PLACEMENT.with_(
            gpu_type=args.gpu_type, gpu_count=args.gpus, memory_limit=args.memory
        )
    return gke.build(train_placement, fallback=fallback, run_timeout=args.run_timeout)
