"""``python -m spottrain.pipelines`` compile|upload|run…|nodepool|rbac|computeclass.

Every subcommand runs the pre-flight guards first and prints a one-line error
(exit 2) for a bad or missing argument instead of a traceback; a service that
cannot be reached exits 69, missing Google credentials 78 (see ``submit``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from spottrain.version import IMAGE

ERROR_EXIT = 2


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (argparse prints the usage too): exit 2."""

    def error(self, message: str):
        self.exit(ERROR_EXIT, f"{self.prog}: error: {message} (see --help)\n")


def _check_out(out: str) -> None:
    """``--out``'s folder must exist and be a folder (checked before compiling)."""
    parent = Path(out).parent
    if Path(out).is_dir() or not parent.is_dir():
        if Path(out).is_dir():
            what = "is a folder"
        else:
            state = "is not a folder" if parent.exists() else "does not exist"
            what = f"{str(parent)!r} {state}"
        raise _guard_error(f"--out {out!r}: {what}; pass a file path in an existing folder")


def _check_out_dir(args: argparse.Namespace) -> None:
    """``--out-dir`` (the committed set, written elsewhere) before compiling."""
    from spottrain.pipelines import compile as comp

    if args.check or args.target:
        flag = "--check" if args.check else "--target"
        raise _guard_error(
            f"--out-dir {args.out_dir!r} writes every committed file elsewhere: not with {flag} "
            "(one --target build goes to --out FILE)"
        )
    if problem := comp.out_dir_problem(args.out_dir):
        raise _guard_error(f"--out-dir {args.out_dir!r}: {problem}")


def _guard_error(message: str):
    from spottrain.pipelines.guards import GuardError

    return GuardError(message)


def _check_positive(**flags: int | None) -> None:
    """``--flag N`` values that must be >= 1 (``None``: not given)."""
    for name, value in flags.items():
        if value is not None and value < 1:
            flag = "--" + name.replace("_", "-")
            raise _guard_error(f"{flag} {value} must be >= 1")


def _template(args: argparse.Namespace, default: str) -> Path:
    from spottrain.pipelines.compile import COMPILED_DIR

    return Path(args.pipeline) if args.pipeline else COMPILED_DIR / default


def _engine(args: argparse.Namespace) -> str:
    """``--engine``; the Job engine by default, the in-pod train for ``--fallback``."""
    if args.fallback and args.engine == "job":
        raise _guard_error(
            "--fallback is the in-pod pipeline's exit-hook fall-back (--engine pod); the "
            "Job-engine pipeline moves to the on-demand pool by itself"
        )
    return args.engine or ("pod" if args.fallback else "job")


def _gke_template(args: argparse.Namespace) -> Path:
    """``--pipeline``, else the committed GKE pipeline for the pool, engine and fall-back."""
    from spottrain.pipelines import compile as comp

    return _template(args, comp.gke_yaml(args.pool, fallback=args.fallback, engine=_engine(args)))


def cmd_compile(args: argparse.Namespace) -> int:
    """Writes the committed YAML (or a copy under --out-dir), checks drift, or one custom build."""
    from spottrain.pipelines import compile as comp
    from spottrain.pipelines import guards, placement
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
        defaults = vars(parser().parse_args(["compile"]))
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
            f"--spot-grace {args.spot_grace} sets the Job engine's pod grace: --target gke-job"
        )
    if args.compute_class and args.target != "gke-job":
        raise guards.GuardError(
            f"--compute-class {args.compute_class!r} is for --target gke-job (the Job engine; "
            "the class moves pods to on-demand itself, so it needs no fall-back variant)"
        )
    if args.target == "gke-job":
        from spottrain.pipelines import gke_job

        return gke_job.build(train_placement, run_timeout=args.run_timeout)
    fallback = None
    if args.target == "gke-fallback":
        fallback = placement.ON_DEMAND_PLACEMENT.with_(
            gpu_type=args.gpu_type, gpu_count=args.gpus, memory_limit=args.memory
        )
    return gke.build(train_placement, fallback=fallback, run_timeout=args.run_timeout)


def cmd_upload(args: argparse.Namespace) -> int:
    """Uploads a compiled pipeline (or a new version) to a KFP dashboard."""
    from spottrain.pipelines import guards, submit

    submit.check_host(args.host)
    template = _gke_template(args)
    _check_gke_template(template)
    guards.check_published_image(template)
    name = args.name or submit.pipeline_name(template)
    with submit.service_errors(f"KFP at {args.host}"):
        submit.check_reachable(args.host, f"KFP at {args.host}")
        client = submit.kfp_client(args.host, namespace=args.namespace)
        ids = submit.upload(
            client, template, name, args.version, args.description, namespace=args.namespace
        )
    print(" ".join(f"{k}={v}" for k, v in ids.items()))
    return 0


def cmd_run_gke(args: argparse.Namespace) -> int:
    """Creates a run on a KFP dashboard after the pre-flight guards."""
    from spottrain.pipelines import submit

    params = submit.parse_params(args.params)
    submit.check_host(args.host)
    template = _gke_template(args)
    from spottrain.pipelines import guards

    _check_gke_template(template)
    # before building a client that may prompt for auth
    guards.preflight(template, params, make_variables=args.make_variables.split())
    guards.check_published_image(template)
    from spottrain.pipelines import argo_retry

    if warning := argo_retry.preflight_warning(args.argo_namespace):
        print(warning, file=sys.stderr)  # a warning: the run is still created
    with submit.service_errors(f"KFP at {args.host}"):
        submit.check_reachable(args.host, f"KFP at {args.host}")
        client = submit.kfp_client(args.host, namespace=args.namespace)
        run_id = submit.run(
            client, template, params, experiment=args.experiment, run_name=args.run_name
        )
    print(f"run_id={run_id}")
    return 0


def cmd_run_vertex(args: argparse.Namespace) -> int:
    """Submits the Vertex pipeline after the pre-flight guards."""
    from spottrain.pipelines import compile as comp
    from spottrain.pipelines import guards, submit

    params = submit.parse_params(args.params)
    submit.check_vertex_args(args.project, args.region, args.bucket)
    submit.check_vertex_params(params, args.service_account)
    template = _template(args, comp.VERTEX_FALLBACK_YAML if args.fallback else comp.VERTEX_YAML)
    spec = submit.check_vertex_template(template)
    from spottrain.pipelines import vertex

    vertex.check_key_region(spec, args.region)
    guards.check_make_variables(spec, args.make_variables.split())
    guards.preflight(template, params)  # before looking for credentials
    guards.check_published_image(template)
    with submit.service_errors(f"Vertex AI in {args.region}"):
        credentials = submit.google_credentials()
        submit.check_reachable(submit.vertex_endpoint(args.region), f"Vertex AI in {args.region}")
        job = submit.vertex_job(
            template,
            params,
            project=args.project,
            region=args.region,
            bucket=args.bucket,
            credentials=credentials,
        )
        name = submit.submit_vertex(job, args.service_account)
    print(f"submitted {name}")
    return 0


def cmd_run_local(args: argparse.Namespace) -> int:
    """Runs the whole pipeline locally under kfp.local with fake GCS."""
    _check_positive(workers=args.workers, train_steps=args.train_steps)
    from spottrain.trainer import fileio

    if blocked := fileio.folder_problem(args.out):
        raise _guard_error(f"--out {args.out!r}: {blocked}")
    try:
        fileio.probe_writable(args.out)
    except OSError as e:
        raise _guard_error(f"--out {args.out!r} is not writable: {e.strerror}") from None
    for flag, value in (("--limit", args.limit), ("--preempt-at-step", args.preempt_at_step)):
        if value is not None and value < 0:
            raise _guard_error(f"{flag} {value} must be >= 0")
    from spottrain.pipelines import local

    result = local.run_local(
        Path(args.out),
        workers=args.workers,
        preempt_at_step=args.preempt_at_step,
        train_steps=args.train_steps,
        limit=args.limit,
        fallback=args.fallback,
    )
    print(result.report())
    return 0 if result.ok else 1


def _check_gke_template(template: Path) -> None:
    """A Vertex pipeline (custom-job components) does not run on KFP on GKE."""
    from spottrain.pipelines import guards, templates

    spec, _ = templates.load_template(template)
    if templates.custom_jobs(spec):
        raise guards.GuardError(
            f"--pipeline {str(template)!r} is a Vertex AI pipeline (Vertex custom jobs): "
            "submit it with run-vertex, or pass a GKE pipeline (spottrain_gke_*.yaml)"
        )


def parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    from spottrain.pipelines.cluster_setup import ARGO_NAMESPACE_HELP
    from spottrain.pipelines.placement import DEFAULT_SPOT_GRACE_SECONDS, RUN_TIMEOUT, SPOT_POOLS

    p = _Parser(prog="python -m spottrain.pipelines", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("compile", help="write the committed component and pipeline YAML")
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
    c.set_defaults(func=cmd_compile)

    def kfp_args(s: argparse.ArgumentParser) -> None:
        s.add_argument("--host", default="", help="KFP dashboard URL (required)")
        s.add_argument(
            "--namespace",
            default="kubeflow",
            help="multi-user KFP: your profile namespace (runs, experiments and uploaded "
            "pipelines go there); standalone: leave the default",
        )
        s.add_argument(
            "--pool",
            default="preemptible",
            choices=SPOT_POOLS,
            help="the node pool kind the GKE pipeline targets (default %(default)s)",
        )
        s.add_argument(
            "--engine",
            choices=("job", "pod"),
            default=None,
            help="job: train as a Kubernetes Indexed Job (default); pod: in the KFP pod",
        )
        s.add_argument(
            "--fallback",
            action="store_true",
            help="the in-pod variant with the exit-hook on-demand fall-back (implies --engine pod)",
        )
        s.add_argument("--pipeline", help="compiled YAML (default: the GKE pipeline for --pool)")

    u = sub.add_parser("upload", help="upload a pipeline (or a new version) to KFP")
    kfp_args(u)
    u.add_argument("--name", default="", help="pipeline name (default: the template's)")
    u.add_argument("--version", default="", help="version name (default: version+time)")
    u.add_argument("--description", default="", help="description")
    u.set_defaults(func=cmd_upload)

    r = sub.add_parser("run-gke", help="create a KFP run of the GKE pipeline (param=value ...)")
    kfp_args(r)
    r.add_argument("--experiment", default="spottrain", help="experiment name")
    r.add_argument("--run-name", default="", help="run name")
    r.add_argument("params", nargs="*", help="pipeline parameters as name=value")
    r.add_argument("--argo-namespace", default="kubeflow", help=ARGO_NAMESPACE_HELP)
    r.set_defaults(func=cmd_run_gke)

    v = sub.add_parser("run-vertex", help="submit the Vertex pipeline (param=value ...)")
    v.add_argument("--project", default="", help="Google Cloud project (required)")
    v.add_argument("--region", default="", help="Vertex AI region (required)")
    v.add_argument("--bucket", default="", help="gs bucket for the pipeline root (required)")
    v.add_argument("--service-account", default="", help="service account of the pipeline")
    v.add_argument("--pipeline", help="compiled Vertex YAML")
    v.add_argument(
        "--fallback", action="store_true", help="the pipeline whose SPOT jobs fall back to STANDARD"
    )
    v.add_argument("params", nargs="*", help="pipeline parameters as name=value")
    v.set_defaults(func=cmd_run_vertex)

    lr = sub.add_parser("run-local", help="the whole pipeline under kfp.local + fake GCS")
    lr.add_argument("--out", default="out", help="output folder")
    lr.add_argument("--workers", type=int, default=2, help="local MWMS workers")
    lr.add_argument("--preempt-at-step", type=int, default=None, help="0 = no preemption")
    lr.add_argument("--train-steps", type=int, default=None, help="total steps")
    lr.add_argument("--limit", type=int, default=None, help="images to use (0 = all)")
    lr.add_argument(
        "--fallback", action="store_true", help="no spot retries; the on-demand fall-back resumes"
    )
    lr.set_defaults(func=cmd_run_local)
    for s in (r, v):  # the Makefile names its upper-case command-line variables here
        s.add_argument("--make-variables", default="", help=argparse.SUPPRESS)

    from spottrain.pipelines import cluster_setup

    cluster_setup.add_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Runs the CLI; returns the exit code."""
    from spottrain.pipelines.guards import GuardError
    from spottrain.pipelines.submit import ServiceError
    from spottrain.placement import PlacementError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        args = parser().parse_args(argv)
    except SystemExit as done:  # --help, or an argument error already printed (one line)
        return done.code if isinstance(done.code, int) else ERROR_EXIT
    try:
        return args.func(args)
    except (GuardError, PlacementError) as err:  # every config error; one line, no traceback
        print(f"error: {err}", file=sys.stderr)
        return ERROR_EXIT
    except ServiceError as err:  # the request could not be made: see submit's exit codes
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
