"""The pipelines CLI and Makefile targets, up to (and including) real client requests."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from spottrain import placement
from spottrain.pipelines import placement as nodepools

REPO = Path(__file__).resolve().parents[3]


# kfp.Client warns about server versions on every construction.
pytestmark = pytest.mark.filterwarnings("ignore:This client only works:FutureWarning")


def test_make_namespace_is_passed_to_the_cli():
    for target in ("upload", "run-gke"):
        result = make("-n", target, "HOST=h", "NAMESPACE=team-a", "data_src=gs://a")
        assert result.returncode == 0 and '--namespace "team-a"' in result.stdout, result.stdout
        assert "NAMESPACE" not in result.stdout.split("--namespace")[1]


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="needs the gcloud CLI (offline)")
@pytest.mark.parametrize("pool", ["preemptible", "spot", "flex-start", "on-demand"])
def test_gcloud_itself_parses_the_nodepool_command(pool, tmp_path):
    """The real gcloud, offline: with no account it stops after parsing the flags
    (exit 1, "no active account"), while a flag it does not know is exit 2."""
    kwargs = {"reservation": "r1", "reservation_project": "p"} if pool == "on-demand" else {}
    cmd = nodepools.nodepool_command(
        placement.Placement(pool=pool), cluster="c", zone="z", **kwargs,
    )  # fmt: skip
    env = {**os.environ, "CLOUDSDK_CONFIG": str(tmp_path), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1 and "active account" in done.stderr, done.stderr
    typo = subprocess.run([*cmd, "--reservation-affinityy=any"], capture_output=True,
                          text=True, env=env, timeout=120)  # fmt: skip
    assert typo.returncode == 2 and "unrecognized arguments" in typo.stderr


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="needs the gcloud CLI (offline)")
def test_a_spot_pool_with_a_120_s_grace_is_one_paste_gcloud_parses(tmp_path):
    """The printed here-document and command, run by bash with the real gcloud offline:
    the file is written and the flags parse (gcloud stops at "no active account")."""
    out = subprocess.run(
        [sys.executable, "-m", "spottrain.pipelines", "nodepool", "--cluster", "c", "--zone",
         "us-central1-a", "--pool", "spot", "--spot-grace", "120"],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    env = {**os.environ, "CLOUDSDK_CONFIG": str(tmp_path), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}
    done = subprocess.run(["bash", "-e"], input=out.stdout, capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 1 and "active account" in done.stderr, done.stderr
    config = yaml.safe_load((tmp_path / nodepools.SYSTEM_CONFIG_FILE).read_text())
    assert config == placement.spot_node_system_config(120)
    assert "--spot" in out.stdout and "--system-config-from-file=" in out.stdout
    # gcloud's own loader of that file: a gcloud that knows the fields sets them; an older
    # one (528 here) refuses exactly these two, so the rest of the file is what it expects.
    sdk = subprocess.run(["gcloud", "info", "--format=value(installation.sdk_root)"],
                         capture_output=True, text=True, env=env).stdout.strip()  # fmt: skip
    probe = (
        "import sys\n"
        "from googlecloudsdk.api_lib.container import util\n"
        "from googlecloudsdk.api_lib.util import apis\n"
        "m = apis.GetMessagesModule('container', 'v1'); nc = m.NodeConfig()\n"
        "try:\n"
        "    util.LoadSystemConfigFromYAML(nc, sys.stdin.read(), None, m)\n"
        "    k = nc.kubeletConfig; print(k.shutdownGracePeriodSeconds, "
        "k.shutdownGracePeriodCriticalPodsSeconds)\n"
        "except util.NodeConfigError as e: print(e)\n"
    )
    python = os.path.join(sdk, "platform", "bundledpythonunix", "bin", "python3")
    loaded = subprocess.run(
        [python if os.path.exists(python) else sys.executable, "-c", probe],
        input=(tmp_path / nodepools.SYSTEM_CONFIG_FILE).read_text(), capture_output=True,
        text=True, env={**env, "PYTHONPATH": f"{sdk}/lib:{sdk}/lib/third_party"},
    )  # fmt: skip
    assert loaded.stdout.strip() in (
        "120 15",
        "Invalid node config: unknown fields: ['shutdownGracePeriodCriticalPodsSeconds', "
        "'shutdownGracePeriodSeconds'] in \"kubeletConfig\"",
    ), loaded.stdout + loaded.stderr


def make(*args):
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=REPO, capture_output=True, text=True
    )


def test_make_help_lists_the_pipeline_targets():
    out = make("help").stdout
    for target in ("compile", "upload", "run-preemptible", "run-vertex", "gke-nodepool", "image"):
        assert f" {target} " in out.replace("\x1b[0m", " ").replace("\x1b[36m", " ")


@pytest.mark.parametrize(
    "args, needle",
    [
        (["upload"], "make upload: HOST is required"),
        (["run-preemptible"], "make run-preemptible: HOST is required"),
        (["run-vertex", "PROJECT=p"], "make run-vertex: REGION is required"),
        (["gke-nodepool", "CLUSTER=c"], "make gke-nodepool: ZONE is required"),
    ],
)
def test_make_targets_name_their_missing_variables(args, needle):
    result = make(*args)
    assert result.returncode != 0 and needle in result.stderr


def test_make_gke_nodepool_prints_the_spot_command():
    result = make("gke-nodepool", "CLUSTER=prod", "ZONE=us-central1-a", "POOL=spot", "GPUS=2")
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip().splitlines()[-1]
    assert line.startswith("gcloud container node-pools create spot-2gpu-pool --cluster=prod")
    assert "--spot" in line and "--node-taints=cloud.google.com/gke-spot=true:NoSchedule" in line


def test_make_run_preemptible_forwards_lower_case_variables_as_parameters():
    result = make("-n", "run-preemptible", "HOST=h", "data_src=gs://a", "train_steps=5")
    assert "run-gke --host" in result.stdout and "--pool" not in result.stdout
    assert "data_src=gs://a" in result.stdout and "train_steps=5" in result.stdout
    assert "HOST=h" not in result.stdout.split("run-gke --host")[1]


@pytest.mark.parametrize("target", ["run-gke", "run-vertex"])
def test_make_passes_each_parameter_as_one_shell_word_whatever_it_holds(target):
    """JSON with spaces, a quote and a "$" (docs/task-api.md's task_args example) reach
    the CLI as written: once, the shell split them at the space and dropped the rest."""
    import shlex

    args = '{"features": 8, "note": "it\'s $HOME"}'
    result = make("-n", target, "HOST=h", "PROJECT=p", "REGION=r", "BUCKET=b",
                  f"task_args={args}", "data_src=gs://a b")  # fmt: skip
    assert result.returncode == 0, result.stderr
    line = next(ln for ln in result.stdout.splitlines() if "spottrain.pipelines" in ln)
    words = shlex.split(line)
    assert f"task_args={args}" in words and "data_src=gs://a b" in words, words


def test_make_run_gke_takes_the_docs_task_args_example_to_the_image_check():
    """Past the task's pre-flight (which reads task_args) to the placeholder image."""
    result = make("run-gke", "DRY_RUN=1", "data_src=gs://bkt/d", "checkpoint_dir=gs://bkt/c",
                  "task=examples.regression:Regression", 'task_args={"features": 8}')  # fmt: skip
    assert result.returncode != 0 and "runs the placeholder image" in result.stderr, result.stderr


@pytest.mark.parametrize("target", ["upload", "run-preemptible"])
def test_make_pool_and_fallback_pick_the_gke_variant(target):
    result = make("-n", target, "HOST=h", "POOL=spot", "FALLBACK=1", "data_src=gs://a")
    assert result.returncode == 0, result.stderr
    assert '--pool "spot"' in result.stdout and "--fallback" in result.stdout


def test_console_module_entry_point():
    result = subprocess.run(
        [sys.executable, "-m", "spottrain.pipelines", "compile", "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_make_engine_is_passed_on():
    result = make("-n", "run-preemptible", "HOST=h", "ENGINE=pod", "data_src=gs://a")
    assert result.returncode == 0, result.stderr
    assert '--engine "pod"' in result.stdout
    assert "ENGINE" not in result.stdout.split("run-gke --host")[1]  # not a parameter


def test_make_gke_rbac_prints_only_the_verbs_the_launcher_uses():
    import yaml

    result = make("gke-rbac", "NAMESPACE=team-a", "SERVICE_ACCOUNT=runner")
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout.split("\n", 1)[1]) if d]
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
    assert kinds["Role"]["metadata"]["namespace"] == "team-a"
    for binding in ("RoleBinding", "ClusterRoleBinding"):
        assert kinds[binding]["subjects"] == [
            {"kind": "ServiceAccount", "name": "runner", "namespace": "team-a"}
        ]
    assert kinds["ClusterRole"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}
    ]
    verbs = {v for rule in kinds["Role"]["rules"] for v in rule["verbs"]}
    assert verbs == {"create", "get", "patch", "delete", "list"}  # no watch, update, *
    jobsets = next(r for r in kinds["Role"]["rules"] if r["resources"] == ["jobsets"])
    assert jobsets["apiGroups"] == ["jobset.x-k8s.io"]
    assert jobsets["verbs"] == ["create", "get", "list", "patch", "delete"]  # patch: jobsets only
    resources = {r for rule in kinds["Role"]["rules"] for r in rule["resources"]}
    # No Jobs or Services of our own; Kueue's objects only read (a queued gang).
    assert resources == {"jobsets", "pods", "pods/log", "workloads", "localqueues"}
