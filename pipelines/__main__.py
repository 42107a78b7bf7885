"""``python -m spottrain.pipelines`` compile|upload|run…|nodepool|rbac|computeclass.

Every subcommand runs the pre-flight guards first and prints a one-line error
(exit 2) for a bad or missing argument instead of a traceback; a service that
cannot be reached exits 69, missing Google credentials 78 (see ``submit``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

ERROR_EXIT = 2


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (argparse prints the usage too): exit 2."""

    def error(self, message: str):
        self.exit(ERROR_EXIT, f"{self.prog}: error: {message} (see --help)\n")


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
    """``--pipeline``, else ``default`` from ``--yaml-dir`` or the committed YAML.

    ``--yaml-dir`` is a ``compile --out-dir`` build, e.g. ``make compile IMAGE=…``'s.
    """
    from spottrain.pipelines.compile import COMPILED_DIR, repo_path

    if args.pipeline:
        return Path(args.pipeline)
    if args.yaml_dir:
        return Path(args.yaml_dir) / repo_path(COMPILED_DIR / default)
    return COMPILED_DIR / default


def _engine(args: argparse.Namespace) -> str:
    """``--engine``; the JobSet engine by default, the in-pod train for ``--fallback``."""
    if args.fallback and args.engine == "job":
        raise _guard_error(
            "--fallback is the in-pod pipeline's exit-hook fall-back (--engine pod); the "
            "JobSet-engine pipeline moves to the on-demand pool by itself"
        )
    return args.engine or ("pod" if args.fallback else "job")


def _gke_template(args: argparse.Namespace) -> Path:
    """``--pipeline``, else the committed GKE pipeline for the pool, engine and fall-back."""
    from spottrain.pipelines import compile as comp

    return _template(args, comp.gke_yaml(args.pool, fallback=args.fallback, engine=_engine(args)))


def cmd_upload(args: argparse.Namespace) -> int:
    """Uploads a compiled pipeline (or a new version) to a KFP dashboard."""
    from spottrain.pipelines import guards, submit

    submit.check_host(args.host)
    _check_namespaces(args)
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
    if args.host or not args.dry_run:
        submit.check_host(args.host)
    _check_namespaces(args)
    submit.check_gke_params(params)
    template = _gke_template(args)
    from spottrain.pipelines import guards

    _check_gke_template(template)
    # before building a client that may prompt for auth
    arguments = guards.preflight(template, params, make_variables=args.make_variables.split())
    guards.check_published_image(template)
    if args.dry_run:
        request = submit.run_request(
            template, arguments, experiment=args.experiment, run_name=args.run_name
        )
        return _dry_run(
            request,
            f"the cluster's checks (the JobSet API and RBAC, Argo's retry policy in "
            f"{args.argo_namespace!r}) and KFP at {args.host or '(no --host)'}",
        )
    from spottrain.pipelines import argo_retry

    if warning := argo_retry.preflight_warning(args.argo_namespace):
        print(warning, file=sys.stderr)  # a warning: the run is still created
    _check_jobset_engine(template, args.namespace, str(arguments.get("queue") or ""))
    with submit.service_errors(f"KFP at {args.host}"):
        submit.check_reachable(args.host, f"KFP at {args.host}")
        client = submit.kfp_client(args.host, namespace=args.namespace)
        run_id = submit.run(
            client, template, params, experiment=args.experiment, run_name=args.run_name
        )
    print(f"run_id={run_id}")
    return 0


def _dry_run(request: dict, skipped: str) -> int:
    """Prints the request a run would send (stdout) and what was not checked (stderr)."""
    print(json.dumps(request, indent=2, sort_keys=True))
    print(f"dry run: nothing was sent; the pre-flight passed; not checked: {skipped}",
          file=sys.stderr)  # fmt: skip
    return 0


def _check_jobset_engine(template: Path, namespace: str, queue: str = "") -> None:
    """Refuses a JobSet-engine run the cluster cannot start (no JobSet API, RBAC, Kueue).

    With ``queue``, Kueue's API and that LocalQueue must be there too.
    """
    from spottrain.pipelines import guards, jobset_check, templates

    if not templates.job_engine_tasks(templates.load_template(template)[0]):
        return
    if problem := jobset_check.problem(namespace, queue=queue):
        raise guards.GuardError(problem)


def cmd_run_vertex(args: argparse.Namespace) -> int:
    """Submits the Vertex pipeline after the pre-flight guards."""
    from spottrain.pipelines import compile as comp
    from spottrain.pipelines import guards, submit

    params = submit.parse_params(args.params)
    submit.check_vertex_args(args.project, args.region, args.bucket)
    submit.check_vertex_params(params, args.service_account)
    template = _template(args, comp.VERTEX_FALLBACK_YAML if args.fallback else comp.VERTEX_YAML)
    spec = submit.check_vertex_template(template)
    if args.fallback:
        submit.check_vertex_fallback(spec, template)
    from spottrain.pipelines import vertex

    vertex.check_key_region(spec, args.region)
    guards.check_make_variables(spec, args.make_variables.split())
    guards.preflight(template, params)  # before looking for credentials
    guards.check_published_image(template)
    from spottrain.pipelines import deadline

    try:
        for line in deadline.check(spec, params):  # finish_by=6h becomes its time here
            print(line)
    except deadline.LadderError as err:
        raise submit.SubmitError(str(err)) from None
    if args.dry_run:
        from google.auth.credentials import AnonymousCredentials

        job = submit.vertex_job(
            template, params, project=args.project, region=args.region, bucket=args.bucket,
            credentials=AnonymousCredentials(),
        )  # fmt: skip
        request = submit.vertex_request(job, args.service_account)
        return _dry_run(request, f"your credentials and Vertex AI in {args.region}")
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
    from spottrain import fileio

    if blocked := fileio.unwritable_folder(args.out):
        raise _guard_error(f"--out {args.out!r}: {blocked}")
    for flag, value in (("--limit", args.limit), ("--preempt-at-step", args.preempt_at_step)):
        if value is not None and value < 0:
            raise _guard_error(f"{flag} {value} must be >= 0")
    from spottrain.pipelines import local

    log = None if args.verbose else Path(args.out).resolve() / "run.log"
    if log is not None:
        print(f"run-local: one line per event here; everything in {log} (--verbose: all here)")
    result = local.run_local(
        Path(args.out),
        workers=args.workers,
        preempt_at_step=args.preempt_at_step,
        train_steps=args.train_steps,
        limit=args.limit,
        fallback=args.fallback,
        log=log,
    )
    print(result.report())
    return 0 if result.ok else 1


def _check_namespaces(args: argparse.Namespace) -> None:
    """``--namespace`` and ``--argo-namespace`` as Kubernetes names (no request)."""
    from spottrain.pipelines.cluster_setup import check_namespace

    check_namespace("--namespace", args.namespace)
    if hasattr(args, "argo_namespace"):
        check_namespace("--argo-namespace", args.argo_namespace)


def _check_gke_template(template: Path) -> None:
    """A Vertex pipeline (custom-job components) does not run on KFP on GKE."""
    from spottrain.pipelines import guards, templates

    spec, _ = templates.load_template(template)
    if templates.custom_jobs(spec):
        raise guards.GuardError(
            f"--pipeline {str(template)!r} is a Vertex AI pipeline (Vertex custom jobs): "
            "submit it with run-vertex, or pass a GKE pipeline (spottrain_gke_*.yaml)"
        )


def _yaml_dir_arg(s: argparse.ArgumentParser) -> None:
    s.add_argument(
        "--yaml-dir",
        default="",
        help="take the default pipeline from this `compile --out-dir` folder (what "
        "`make compile IMAGE=...` writes) instead of the committed YAML",
    )


DRY_RUN_HELP = (
    "run the pre-flight and print the request that would be sent (JSON), sending nothing "
    "and needing no cluster, KFP or credentials"
)


def parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    from spottrain.pipelines import compile_cli
    from spottrain.pipelines.cluster_setup import ARGO_NAMESPACE_HELP
    from spottrain.placement import SPOT_POOLS

    p = _Parser(prog="python -m spottrain.pipelines", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    compile_cli.add_parser(sub)

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
            help="job: train as a JobSet (default); pod: in the KFP pod",
        )
        s.add_argument(
            "--fallback",
            action="store_true",
            help="the in-pod variant with the exit-hook on-demand fall-back (implies --engine pod)",
        )
        s.add_argument("--pipeline", help="compiled YAML (default: the GKE pipeline for --pool)")
        _yaml_dir_arg(s)

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
    r.add_argument("--dry-run", action="store_true", help=DRY_RUN_HELP)
    r.set_defaults(func=cmd_run_gke)

    v = sub.add_parser("run-vertex", help="submit the Vertex pipeline (param=value ...)")
    v.add_argument("--project", default="", help="Google Cloud project (required)")
    v.add_argument("--region", default="", help="Vertex AI region (required)")
    v.add_argument("--bucket", default="", help="gs bucket for the pipeline root (required)")
    v.add_argument("--service-account", default="", help="service account of the pipeline")
    v.add_argument("--pipeline", help="compiled Vertex YAML")
    _yaml_dir_arg(v)
    v.add_argument(
        "--fallback", action="store_true", help="the pipeline whose SPOT jobs fall back to STANDARD"
    )
    v.add_argument("params", nargs="*", help="pipeline parameters as name=value")
    v.add_argument("--dry-run", action="store_true", help=DRY_RUN_HELP)
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
    lr.add_argument(
        "--verbose", action="store_true", help="every task's whole output here, not in run.log"
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
