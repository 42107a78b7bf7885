"""Cluster set-up: ``nodepool``, ``computeclass``, ``kueue``, ``rbac``, ``retry-policy``, JobSet.

Each prints what it would do (a gcloud or kubectl command, or manifests) and runs it
with ``--execute``; ``python -m spottrain.pipelines`` registers them here.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from spottrain.pipelines import argo_retry
from spottrain.pipelines.guards import GuardError
from spottrain.placement import DEFAULT_SPOT_GRACE_SECONDS

ARGO_NAMESPACE_HELP = "namespace of Argo's workflow-controller-configmap (default %(default)s)"


def _guard_error(message: str) -> GuardError:
    return GuardError(message)


def check_namespace(flag: str, value: str) -> None:
    """A namespace flag's value as Kubernetes accepts it (a DNS-1123 label)."""
    from spottrain.runtime.train_job import rbac

    if problem := rbac.name_problem("--namespace", value):
        raise _guard_error(problem.replace("--namespace", flag, 1))


def _check_cluster(execute: bool) -> None:
    """``--execute`` needs kubectl and a cluster: refuse in one line before kubectl's many."""
    import shutil

    if not execute:
        return
    if shutil.which("kubectl") is None:
        raise _guard_error("--execute needs kubectl on PATH")
    try:
        with argo_retry.check_kubeconfig():
            pass
    except argo_retry.RetryPolicyError as err:
        raise _guard_error(f"--execute needs a cluster: {err}") from None


def _print_or_apply(text: str, execute: bool, server_side: bool = False) -> int:
    """Prints manifests; with ``execute`` also applies them with ``kubectl apply -f -``."""
    _check_cluster(execute)
    print(text, end="")
    if not execute:
        return 0
    cmd = ["kubectl", "apply", *(["--server-side"] if server_side else []), "-f", "-"]
    try:
        return subprocess.run(cmd, input=text, text=True).returncode
    except FileNotFoundError:
        raise _guard_error("--execute needs kubectl on PATH") from None


def cmd_retry_policy(args: argparse.Namespace) -> int:
    """Prints (or ``--execute``: runs) the kubectl patch of Argo's template retry policy."""
    check_namespace("--argo-namespace", args.argo_namespace)
    try:
        current = argo_retry.read_live(args.argo_namespace)
        source = (
            f"the live {args.argo_namespace}/{argo_retry.CONFIGMAP} "
            f"({argo_retry.current_context()})"
        )
    except argo_retry.RetryPolicyError as err:
        if args.execute:
            raise _guard_error(f"--execute needs to read the live configmap: {err}") from None
        current, source = argo_retry.KFP_WORKFLOW_DEFAULTS, f"KFP 2.17.0's shipped value ({err})"
    try:
        cmd = argo_retry.patch_command(
            current or "", args.policy, args.argo_namespace, args.preemption_budget
        )
    except argo_retry.RetryPolicyError as err:
        raise _guard_error(str(err)) from None
    print(f"# {argo_retry.KEY} from {source}, retry policy set to {args.policy}", file=sys.stderr)
    print(argo_retry.format_command(cmd))
    if args.execute:
        try:
            return subprocess.run(cmd).returncode
        except FileNotFoundError:
            raise _guard_error("--execute needs kubectl on PATH") from None
    return 0


def cmd_rbac(args: argparse.Namespace) -> int:
    """Prints (or ``--execute``: applies with kubectl) the JobSet launcher's RBAC."""
    from spottrain.runtime.train_job import rbac

    for name, value in (
        ("--namespace", args.namespace),
        ("--service-account", args.service_account),
    ):
        if not value:
            raise _guard_error(f"{name} is empty")
        if problem := rbac.name_problem(name, value):
            raise _guard_error(problem)
    return _print_or_apply(rbac.render(args.namespace, args.service_account), args.execute)


# The pinned JobSet release the engine is built and tested against (tools/jobset), as
# upstream's README installs it (sigs.k8s.io/jobset v0.12.0 README.md:61: server-side,
# its CRD being larger than client-side apply's annotation allows).
JOBSET_VERSION = "v0.12.0"
JOBSET_MANIFESTS = (
    f"https://github.com/kubernetes-sigs/jobset/releases/download/{JOBSET_VERSION}/manifests.yaml"
)


def jobset_commands() -> list[list[str]]:
    """Install JobSet's controller (namespace ``jobset-system``), then wait for it to run."""
    return [
        ["kubectl", "apply", "--server-side", "-f", JOBSET_MANIFESTS],
        ["kubectl", "-n", "jobset-system", "rollout", "status",
         "deployment/jobset-controller-manager", "--timeout=180s"],
    ]  # fmt: skip


def cmd_jobset(args: argparse.Namespace) -> int:
    """Prints (or ``--execute``: runs) the pinned JobSet install."""
    import shlex

    _check_cluster(args.execute)
    for cmd in jobset_commands():
        print(shlex.join(cmd))
        if args.execute:
            code = subprocess.run(cmd).returncode
            if code:
                return code
    return 0


def cmd_nodepool(args: argparse.Namespace) -> int:
    """Prints (or runs) the gcloud command creating the GPU node pool."""
    from spottrain import placement
    from spottrain.pipelines import placement as nodepools

    placement.check_gpu_type(args.gpu_type)
    pool = placement.Placement(
        pool=args.pool, gpu_type=args.gpu_type, gpu_count=args.gpus, memory_limit=""
    )
    kwargs = dict(
        cluster=args.cluster,
        zone=args.zone,
        name=args.name,
        machine_type=args.machine_type,
        min_nodes=args.min_nodes,
        max_nodes=args.max_nodes,
        reservation=args.reservation,
        reservation_project=args.reservation_project,
        spot_grace_seconds=args.spot_grace,
    )
    cmd = nodepools.nodepool_command(pool, **kwargs)
    nodepools.check_zone(args.zone)
    config = ""
    if args.spot_grace != DEFAULT_SPOT_GRACE_SECONDS:
        config = yaml.safe_dump(placement.spot_node_system_config(args.spot_grace))
        # Printed as a here-document so that the output stays one paste into a shell.
        print(f"cat > {nodepools.SYSTEM_CONFIG_FILE} <<'EOF'\n{config}EOF")
    print(nodepools.format_command(cmd))
    if not args.execute:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        if config:
            path = Path(tmp) / nodepools.SYSTEM_CONFIG_FILE
            path.write_text(config)
            cmd = nodepools.nodepool_command(pool, **kwargs, system_config_file=str(path))
        return subprocess.call(cmd)


def cmd_computeclass(args: argparse.Namespace) -> int:
    """Prints (or applies with kubectl) the training ComputeClass."""
    from spottrain.pipelines import computeclass

    cls = computeclass.manifest(
        args.name,
        args.gpu_type,
        args.gpus,
        reservation=args.reservation,
        reservation_project=args.reservation_project,
        spot_grace_seconds=args.spot_grace,
        flex_start=args.flex_start,
    )
    return _print_or_apply(computeclass.render(cls), args.execute)


def cmd_kueue(args: argparse.Namespace) -> int:
    """Prints (or applies with kubectl) the Kueue queue for the JobSet engine's gangs."""
    from spottrain.ladder import LadderError, Rung, parse
    from spottrain.pipelines import kueue
    from spottrain.placement import PlacementError

    check_namespace("--namespace", args.namespace)
    defaults = Rung("spot", "", args.gpu_type, args.gpus, args.workers)
    try:
        ladder = parse(args.ladder, defaults)
        gang = ladder[0].workers * ladder[0].gpu_count
        quota = args.gpu_quota if args.gpu_quota is not None else max(kueue.DEFAULT_GPU_QUOTA, gang)
        if quota < gang:
            # Kueue admits a workload whole or not at all: one larger than every flavor's
            # quota waits for ever ("> maximum capacity", the launcher's 64 at run time).
            raise PlacementError(
                f"--gpu-quota {quota} is less than one gang's {gang} GPUs ({ladder[0].workers} "
                f"workers x {ladder[0].gpu_count}): the queue could never admit it; give "
                f"GPU_QUOTA={gang} or more"
            )
        objects = kueue.from_ladder(
            ladder, namespace=args.namespace, local_queue=args.local_queue,
            cluster_queue=args.cluster_queue, gpu_quota=quota,
        )  # fmt: skip
    except (LadderError, PlacementError) as err:
        raise _guard_error(str(err)) from None
    return _print_or_apply(kueue.render(objects), args.execute, server_side=True)


def add_parsers(sub) -> None:
    """Adds the set-up subcommands to ``python -m spottrain.pipelines``'s parser."""
    rp = sub.add_parser(
        "retry-policy", help="print (or --execute) the patch of Argo's template retry policy"
    )
    rp.add_argument(
        "--policy",
        default=argo_retry.RECOMMENDED_POLICY,
        choices=[argo_retry.RECOMMENDED_POLICY, *argo_retry.RETRIES_FAILED],
        help="preemption (default): retry preempted pods, never fatal exits, other "
        "failures only where the task set_retry; Always/OnFailure: Argo's, no expression",
    )
    rp.add_argument(
        "--preemption-budget",
        type=int,
        default=argo_retry.PREEMPTION_BUDGET,
        help="retries of a preempted task without set_retry (default %(default)s)",
    )
    rp.add_argument("--argo-namespace", default="kubeflow", help=ARGO_NAMESPACE_HELP)
    rp.add_argument("--execute", action="store_true", help="run kubectl instead of printing")
    rp.set_defaults(func=cmd_retry_policy)

    rb = sub.add_parser("rbac", help="print (or --execute) the JobSet launcher's RBAC")
    rb.add_argument("--namespace", default="kubeflow", help="the pipelines' namespace")
    rb.add_argument(
        "--service-account", default="pipeline-runner", help="the pipeline pods' service account"
    )
    rb.add_argument("--execute", action="store_true", help="kubectl apply instead of printing")
    rb.set_defaults(func=cmd_rbac)

    js = sub.add_parser(
        "jobset", help=f"print (or --execute) the install of JobSet {JOBSET_VERSION}"
    )
    js.add_argument("--execute", action="store_true", help="run kubectl instead of printing")
    js.set_defaults(func=cmd_jobset)

    n = sub.add_parser("nodepool", help="print (or --execute) the gcloud node-pool command")
    n.add_argument("--cluster", default="", help="GKE cluster (required)")
    n.add_argument("--zone", default="", help="cluster zone (required)")
    n.add_argument("--name", default="", help="pool name")
    n.add_argument("--pool", default="preemptible", help="preemptible|spot|on-demand")
    n.add_argument("--gpu-type", default="nvidia-tesla-t4", help="accelerator type")
    n.add_argument("--gpus", type=int, default=1, help="GPUs per node")
    n.add_argument("--machine-type", default="n1-highmem-8", help="machine type")
    n.add_argument("--min-nodes", type=int, default=0, help="autoscaling minimum")
    n.add_argument("--max-nodes", type=int, default=4, help="autoscaling maximum")
    n.add_argument("--reservation", default="", help="on-demand pools: consume this reservation")
    n.add_argument("--reservation-project", default="", help="its project, if shared")
    n.add_argument(
        "--spot-grace",
        type=int,
        default=DEFAULT_SPOT_GRACE_SECONDS,
        help="Spot pools: the nodes' shutdown grace in seconds, 30 (GKE's default) or 120 "
        "(GKE 1.35.0-gke.1171000 and later; a gcloud that knows the field)",
    )
    n.add_argument("--execute", action="store_true", help="run gcloud instead of printing")
    n.set_defaults(func=cmd_nodepool)

    c = sub.add_parser("computeclass", help="print (or --execute) a ComputeClass for training")
    c.add_argument("--name", default="spottrain-gpu", help="the class name pods select")
    c.add_argument("--gpu-type", default="nvidia-tesla-t4", help="GKE accelerator name")
    c.add_argument("--gpus", type=int, default=1, help="GPUs per node")
    c.add_argument("--reservation", default="", help="a specific reservation to use first")
    c.add_argument("--reservation-project", default="", help="its project, if shared")
    c.add_argument(
        "--spot-grace",
        type=int,
        default=DEFAULT_SPOT_GRACE_SECONDS,
        help="spot nodes' shutdown grace in seconds: 30 (GKE's default) or 120 (GKE "
        "1.35.0-gke.1171000 and later)",
    )
    c.add_argument(
        "--flex-start", action="store_true", help="flex-start capacity between spot and on-demand"
    )
    c.add_argument("--execute", action="store_true", help="kubectl apply instead of printing")
    c.set_defaults(func=cmd_computeclass)

    from spottrain.pipelines.kueue import DEFAULT_GPU_QUOTA  # light: no kfp, no kubernetes

    k = sub.add_parser("kueue", help="print (or --execute) a Kueue queue for the JobSet gangs")
    k.add_argument("--namespace", default="kubeflow", help="the pipelines' namespace")
    k.add_argument("--local-queue", default="spottrain", help="what a run's queue names")
    k.add_argument("--cluster-queue", default="spottrain", help="the ClusterQueue's name")
    k.add_argument("--gpu-type", default="nvidia-tesla-t4", help="GKE accelerator name")
    k.add_argument("--gpus", type=int, default=1, help="GPUs per worker")
    k.add_argument("--workers", type=int, default=2, help="workers of a gang")
    k.add_argument(
        "--gpu-quota", type=int,
        help=f"GPUs each flavor may hold (default {DEFAULT_GPU_QUOTA}, or one gang's if more)",
    )  # fmt: skip
    k.add_argument(
        "--ladder",
        default='[{"capacity": "spot"}, {"capacity": "on-demand"}]',
        help="the flavors in order, a ladder's JSON (spot, flex-start, on-demand)",
    )
    k.add_argument("--execute", action="store_true", help="kubectl apply instead of printing")
    k.set_defaults(func=cmd_kueue)
