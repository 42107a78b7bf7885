"""Every bad input of the CLI: one stderr line naming the value, the right exit code, fast.

A traceback exits 1, which KFP and Vertex retry; these are refused instead, with
exit 2 for a usage error, 69 for a service that cannot be reached and 78 for
missing Google credentials (see ``pipelines/submit.py``).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spottrain.pipelines import __main__ as cli
from spottrain.pipelines import compile as comp

REPO = Path(__file__).resolve().parents[3]


UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens there


GOOD = ["data_src=gs://my-bucket/d", "checkpoint_dir=gs://my-bucket/c"]


VERTEX_OK = ["--project", "my-project", "--region", "us-central1", "--bucket", "my-bucket"]


GKE_SPOT = str(comp.COMPILED_DIR / comp.gke_yaml("spot"))


VERTEX_YAML = str(comp.COMPILED_DIR / comp.VERTEX_YAML)


PUSHED = ["--pipeline", "{pushed}"]


def run_gke(*params, host=UNREACHABLE):
    """run-gke with GOOD's parameters, less those ``params`` give (twice is refused)."""
    given = {p.partition("=")[0] for p in params if not p.startswith("-")}
    return ["run-gke", "--host", host, *[g for g in GOOD if g.partition("=")[0] not in given],
            *params]  # fmt: skip


def files(tmp: Path) -> dict[str, str]:
    (tmp / "broken.yaml").write_text("a: [b\n")
    (tmp / "scalar.yaml").write_text("just a string\n")
    (tmp / "list.yaml").write_text("- 1\n- 2\n")
    return {k: str(tmp / f"{k}.yaml") for k in ("broken", "scalar", "list")}


# (argv, exit code, text the one line must contain); "{tmp}" and "{broken}" etc. filled in.
CASES = [
    # --host: unreachable is operational (69), malformed a usage error (2)
    # (a request is only made for a pipeline compiled against a pushed image: "{pushed}")
    (["upload", "--host", UNREACHABLE, *PUSHED], 69, "KFP at http://127.0.0.1:9 is unreachable"),
    (run_gke(*PUSHED), 69, "KFP at http://127.0.0.1:9 is unreachable"),
    (["upload", "--host", UNREACHABLE], 2, "runs the placeholder image"),
    (run_gke(), 2, "runs the placeholder image"),
    (["upload", "--host", "not-a-url"], 2, "--host 'not-a-url' is not a KFP dashboard URL"),
    (["upload", "--host", "ftp://x"], 2, "--host 'ftp://x' is not a KFP dashboard URL"),
    (run_gke(host="not-a-url"), 2, "--host 'not-a-url'"),
    (run_gke(host="http://x:notaport"), 2, "--host 'http://x:notaport'"),
    # parameter values, by spottrain.trainer.config.validate
    (run_gke("learning_rate=nan"), 2, "learning_rate nan must be in (0, 10)"),
    (run_gke("train_steps=-5"), 2, "train_steps (-5)"),
    (
        ["run-gke", "--host", UNREACHABLE, "--engine", "pod", *GOOD, "local_workers=0"],
        2,
        "local_workers=0 must be >= 1",
    ),
    (run_gke("workers=0"), 2, "workers=0: expected 1 to 100000"),
    (run_gke("workers=100001"), 2, "workers=100001: expected 1 to 100000"),
    (run_gke("unschedulable_timeout=-1"), 2, "unschedulable_timeout=-1 must be >= 0"),
    (run_gke("checkpoint_dir=/gcs/b/c"), 2, "the JobSet-engine train's pods need a gs:// folder"),
    (run_gke("--engine", "job", "--fallback"), 2, "--fallback is the in-pod pipeline's"),
    (run_gke("image_size=0"), 2, "image_size 0 is out of range"),
    (run_gke("batch_size_per_replica=0"), 2, "batch_size_per_replica 0 must be positive"),
    (run_gke("save_every_steps=0"), 2, "save_every_steps 0 must be positive"),
    (run_gke("backbone=resnet"), 2, "backbone 'resnet' is unknown"),
    (run_gke("steps_per_loop=fast"), 2, "steps_per_loop: 'fast' must be auto or a whole number"),
    (run_gke("jit_compile=maybe"), 2, "jit_compile: invalid choice: 'maybe'"),
    (run_gke("weights=foo"), 2, "weights 'foo' is unknown"),
    (run_gke("backbone=small_cnn"), 2, "weights imagenet is not available for backbone small_cnn"),
    (run_gke("learning_rate=inf"), 2, "learning_rate inf"),
    (run_gke("data_src="), 2, "pipeline parameter data_src is empty"),
    (run_gke("checkpoint_dir="), 2, "checkpoint_dir='' is not persistent"),
    (run_gke("train_steps="), 2, "train_steps='' is not a valid integer"),
    (run_gke("TRAIN_STEPS=5"), 2, "'TRAIN_STEPS': names are lower case, use train_steps="),
    (run_gke("train_step=5"), 2, "unknown pipeline parameter 'train_step'"),
    (run_gke("=5"), 2, "'=5' is not name=value"),
    (run_gke("--make-variables", "TRAIN_STEPS"), 2, "make variable TRAIN_STEPS"),
    (run_gke("--pool", "bogus"), 2, "argument --pool: invalid choice: 'bogus'"),
    (run_gke("--pipeline", VERTEX_YAML), 2, "is a Vertex AI pipeline"),
    # run-vertex: region, project, bucket, credentials, template
    (["run-vertex", *VERTEX_OK, "--region", "moon-1", *GOOD], 2, "REGION='moon-1'"),
    (["run-vertex", *VERTEX_OK, "--bucket", "Bad_Bucket!", *GOOD], 2, "'Bad_Bucket!'"),
    (["run-vertex", *VERTEX_OK, "--bucket", "gs://ab", *GOOD], 2, "bucket name 'ab'"),
    (["run-vertex", *VERTEX_OK, "--bucket", "my-google-b", *GOOD], 2, "contain 'google'"),
    (["run-vertex", *VERTEX_OK, "--bucket", "10.0.0.1", *GOOD], 2, "not be an IP address"),
    (["run-vertex", *VERTEX_OK, "--project", "My_Project", *GOOD], 2, "PROJECT='My_Project'"),
    (
        ["run-vertex", *VERTEX_OK, "--service-account", "runner", *GOOD],
        2,
        "SERVICE_ACCOUNT='runner' is not a service account e-mail",
    ),
    (
        ["run-vertex", *VERTEX_OK, *GOOD, "service_account=me"],
        2,
        "service_account='me' is not a service account e-mail",
    ),
    (
        ["run-vertex", *VERTEX_OK, "data_src=/home/me/images", "checkpoint_dir=gs://my-bucket/c"],
        2,
        "data_src='/home/me/images' is not on Cloud Storage",
    ),
    (
        ["run-vertex", *VERTEX_OK, "--pipeline", "{pushed_vertex}", *GOOD],
        78,
        "no Google credentials",
    ),
    (["run-vertex", *VERTEX_OK, *GOOD], 2, "runs the placeholder image"),
    (["run-vertex", *VERTEX_OK, "--pipeline", GKE_SPOT, *GOOD], 2, "kfp-kubernetes platform"),
    (["run-vertex", *VERTEX_OK, "image_size=0", *GOOD], 2, "image_size 0 is out of range"),
    (["run-vertex", *VERTEX_OK, "--make-variables", "IMAGE_SIZE", *GOOD], 2, "IMAGE_SIZE"),
    # --pipeline: missing, not YAML, not a compiled pipeline
    (["upload", "--host", "http://x", "--pipeline", "{tmp}/missing.yaml"], 2, "missing.yaml"),
    (["upload", "--host", "http://x", "--pipeline", "{tmp}"], 2, "cannot be read"),
    (["upload", "--host", "http://x", "--pipeline", "{broken}"], 2, "is not YAML (line 2)"),
    (["upload", "--host", "http://x", "--pipeline", "{scalar}"], 2, "not a compiled KFP pipeline"),
    (["upload", "--host", "http://x", "--pipeline", "{list}"], 2, "not a compiled KFP pipeline"),
    (["upload", "--host", "http://x", "--pipeline", VERTEX_YAML], 2, "is a Vertex AI pipeline"),
    # compile --out, GPU types, placement values
    (["compile", "--target", "gke", "--out", "/etc/hostname/x.yaml"], 2, "'/etc/hostname' is not"),
    (["compile", "--target", "gke", "--out", "{tmp}/no/x.yaml"], 2, "does not exist"),
    (["compile", "--target", "gke", "--out", "{tmp}"], 2, "is a folder"),
    (
        ["compile", "--target", "gke", "--out", "{tmp}/x.yaml", "--gpu-type", "nvidia-tesla-t5"],
        2,
        "--gpu-type 'nvidia-tesla-t5' is not a known accelerator: did you mean 'nvidia-tesla-t4'",
    ),
    (
        ["compile", "--target", "vertex", "--out", "{tmp}/x.yaml", "--accelerator-type", "T5"],
        2,
        "--accelerator-type 'T5' is not a known accelerator",
    ),
    (["compile", "--target", "gke", "--out", "{tmp}/x.yaml", "--retries", "-1"], 2, "retries=-1"),
    (["compile", "--target", "gke", "--out", "{tmp}/x.yaml", "--gpus", "-1"], 2, "gpu_count=-1"),
    (["compile", "--target", "gke", "--out", "{tmp}/x.yaml", "--pool", "bogus"], 2, "'bogus'"),
    (["compile", "--target", "gke", "--out", "{tmp}/x.yaml", "--gpus", "abc"], 2, "'abc'"),
    (["compile", "--target", "gke", "--out", "{tmp}/x.yaml", "--memory", "lots"], 2, "'lots'"),
    (["compile", "--target", "bogus"], 2, "argument --target: invalid choice"),
    # a build flag without --target would be ignored by the committed YAML
    (["compile", "--memory", "16G"], 2, "--memory '16G' is only used with --target"),
    (["compile", "--pool", "spot"], 2, "--pool 'spot' is only used with --target"),
    (["compile", "--image", ""], 2, "--image '' is not an image reference"),
    (["compile", "--image", "Me/Trainer:v1"], 2, "--image 'Me/Trainer:v1' is not an image"),
    (["compile", "--image", "a b"], 2, "--image 'a b' is not an image reference"),
    (["compile", "--out", "{tmp}/x.yaml"], 2, "is only used with --target"),
    (run_gke("checkpoint_dir=gs://Bad_Bucket/c"), 2, "'Bad_Bucket' is not a Cloud Storage"),
    (run_gke("checkpoint_dir=s3://b/c"), 2, "checkpoint_dir='s3://b/c' is not persistent"),
    # The run's own task, checked on CPU here before the run (pipelines/task_check.py)
    (
        run_gke("task=tests.task_fixtures:WrongShapes", "batch_size_per_replica=4"),
        2,
        "task 'tests.task_fixtures:WrongShapes' fails its pre-flight check (exit 64): check "
        "failed: the task's batches do not fit its model at step 1",
    ),
    (run_gke("task=tests.task_fixtures:Nope"), 2, "Nope"),
    (["nodepool", "--cluster", "c", "--zone", "z", "--gpu-type", "nvidia-tesla-t5"], 2, "t5"),
    (["nodepool", "--cluster", "c", "--zone", "z", "--pool", "bogus"], 2, "pool='bogus'"),
    (["nodepool", "--cluster", "c", "--zone", "z", "--max-nodes", "0"], 2, "max_nodes=0"),
    (
        ["compile", "--target", "gke", "--out", "/tmp/spottrain-x.yaml", "--memory", "16"],
        2,
        "memory_limit='16' has no unit",
    ),
    (["rbac", "--namespace", "Bad_NS!"], 2, "--namespace 'Bad_NS!' is not a Kubernetes name"),
    (["rbac", "--service-account", "a..b"], 2, "--service-account 'a..b' is not a Kubernetes"),
    (["rbac", "--namespace", "n" * 64], 2, "at most 63 characters"),
    # run-local, refused before the copy and the kfp.local run
    (["run-local", "--workers", "0"], 2, "--workers 0 must be >= 1"),
    (["run-local", "--limit", "-5"], 2, "--limit -5 must be >= 0"),
    (["run-local", "--train-steps", "0"], 2, "--train-steps 0 must be >= 1"),
    (["run-local", "--preempt-at-step", "-1"], 2, "--preempt-at-step -1 must be >= 0"),
    (["run-local", "--out", "/etc/hostname/x"], 2, "'/etc/hostname' is a file, not a folder"),
    (["no-such-command"], 2, "invalid choice: 'no-such-command'"),
    # Once silently accepted (issue 29, item 7)
    (
        [
            "compile",
            "--target",
            "gke",
            "--out",
            "{tmp}/x.yaml",
            "--gpus",
            "0",
            "--gpu-type",
            "nvidia-l4",
        ],
        2,
        "--gpu-type 'nvidia-l4' with --gpus 0: a CPU build has no accelerator",
    ),  # fmt: skip
    (
        ["compile", "--target", "vertex", "--out", "{tmp}/x.yaml", "--spot-attempts", "0"],
        2,
        "--spot-attempts 0 is only used with --fallback-strategy STANDARD",
    ),
    (
        [
            "compile",
            "--target",
            "gke",
            "--out",
            "{tmp}/x.yaml",
            "--run-timeout",
            "3600s",
            "--retry-window",
            "7200s",
        ],
        2,
        "--retry-window '7200s' is longer than --run-timeout '3600s'",
    ),  # fmt: skip
    (run_gke("--namespace", "Bad_NS"), 2, "--namespace 'Bad_NS' is not a Kubernetes name"),
    (
        ["upload", "--host", "http://x", "--namespace", "Bad_NS"],
        2,
        "--namespace 'Bad_NS' is not a Kubernetes name",
    ),
    (run_gke("--argo-namespace", "a b"), 2, "--argo-namespace 'a b' is not a Kubernetes name"),
    (["retry-policy", "--argo-namespace", "a b"], 2, "--argo-namespace 'a b' is not a Kubernetes"),
    (
        ["run-gke", "--host", UNREACHABLE, "data_src=/home/me/images", "checkpoint_dir=gs://b-1/c"],
        2,
        "data_src='/home/me/images' is not on Cloud Storage: the copy step runs in a pod",
    ),
    (
        [
            "run-gke",
            "--host",
            UNREACHABLE,
            "data_src=gs://My_Bucket/x",
            "checkpoint_dir=gs://b-1/c",
        ],
        2,
        "data_src='gs://My_Bucket/x': bucket name 'My_Bucket' may only use",
    ),
    (
        ["run-vertex", *VERTEX_OK, "data_src=gs://My_Bucket/x", "checkpoint_dir=gs://b-1/c"],
        2,
        "data_src='gs://My_Bucket/x': bucket name 'My_Bucket' may only use",
    ),
    (
        run_gke("train_steps=5", "train_steps=7"),
        2,
        "pipeline parameter train_steps is given twice (train_steps=5 and train_steps=7)",
    ),
    (
        ["nodepool", "--cluster", "c", "--zone", "us-central1"],
        2,
        "zone='us-central1' is not a Compute Engine zone",
    ),
    (
        ["run-vertex", *VERTEX_OK, "--fallback", "--pipeline", "{pushed_vertex}", *GOOD],
        2,
        "has no fall-back (compile one with --target vertex --fallback-strategy STANDARD",
    ),
    # A region that matches the pattern but does not exist: its API host does not
    # resolve, which read as "unreachable" (a retryable outage).
    (
        ["run-vertex", *VERTEX_OK, "--region", "us-central9", *GOOD],
        2,
        "REGION='us-central9' is not a Vertex AI region: did you mean 'us-central1'?",
    ),
]


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    """No application default credentials and no metadata server probe."""
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")


def fill(argv, tmp_path, pushed_dir=None):
    names = {"tmp": str(tmp_path), **files(tmp_path)}
    if pushed_dir is not None:
        names["pushed"] = str(pushed_dir / comp.GKE_YAML)
        names["pushed_vertex"] = str(pushed_dir / comp.VERTEX_YAML)
    return [a.format(**names) for a in argv]


@pytest.mark.filterwarnings("ignore:This client only works:FutureWarning")
@pytest.mark.parametrize("argv, code, needle", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_bad_input_gets_one_line_and_its_exit_code(argv, code, needle, tmp_path, capsys, request):
    request.getfixturevalue("no_credentials")
    got = cli.main(fill(argv, tmp_path, request.getfixturevalue("pushed_compiled_dir")))
    err = capsys.readouterr().err
    assert (got, err.count("\n")) == (code, 1), err
    assert needle in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv, code",
    [
        (["upload", "--host", UNREACHABLE, *PUSHED], 69),
        (run_gke("train_steps=-5"), 2),
        (["run-local", "--workers", "0"], 2),
        (["run-vertex", *VERTEX_OK, "--region", "moon-1", *GOOD], 2),
    ],
)
def test_real_process_stderr_is_one_line_and_fast(
    argv, code, no_credentials, tmp_path, pushed_compiled_dir
):
    """Fast means as fast as the CLI's own start: the bound is the time of importing what
    every command loads (kfp, kfp-kubernetes: ~1.2 s alone), measured beside it (a busy
    machine slows both alike), not an idle machine's. ``--help`` itself loads neither
    (0.3 s), so it is no longer the reference."""
    argv = fill(argv, tmp_path, pushed_compiled_dir)

    def timed(args):
        started = time.monotonic()
        done = subprocess.run([sys.executable, *args], capture_output=True, text=True)
        return done, time.monotonic() - started

    _, start_up = timed(["-c", "import kfp.dsl, kfp.kubernetes"])
    result, seconds = timed(["-m", "spottrain.pipelines", *argv])
    assert result.returncode == code and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert seconds < 4 * start_up, (f"{seconds:.1f} s", f"kfp's import: {start_up:.1f} s")


def make(*args):
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=REPO, capture_output=True, text=True
    )


def test_make_names_upper_case_variables_to_the_cli():
    dry = make("-n", "run-gke", "HOST=h", "TRAIN_STEPS=5", "data_src=gs://a")
    assert '--make-variables "TRAIN_STEPS"' in dry.stdout
    # The Makefile's own variables are not pipeline parameters (service_account is one).
    dry = make("-n", "run-vertex", "PROJECT=p", "REGION=r", "BUCKET=b", "SERVICE_ACCOUNT=s")
    assert "--make-variables" not in dry.stdout
    result = make("run-gke", f"HOST={UNREACHABLE}", "TRAIN_STEPS=5", *GOOD)
    assert result.returncode != 0
    assert result.stderr.splitlines()[0] == (
        "error: make variable TRAIN_STEPS is not a pipeline parameter: parameter names are "
        "lower case, use train_steps=..."
    )


def test_make_gke_nodepool_refuses_an_unknown_gpu_type():
    result = make("gke-nodepool", "CLUSTER=c", "ZONE=z", "GPU_TYPE=nvidia-tesla-t5")
    assert result.returncode != 0
    assert result.stderr.splitlines()[0].startswith("error: --gpu-type 'nvidia-tesla-t5'")


def test_an_unreachable_vertex_endpoint_is_one_line_in_seconds(tmp_path, pushed_compiled_dir):
    """Credentials found, the endpoint does not answer (here: the proxy refuses): 69 in
    seconds, naming the region and the hop, instead of 90 s of SDK retries ending in
    a misleading "HTTP 503"."""
    creds = tmp_path / "adc.json"  # authorized-user credentials load without a request
    creds.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": "x",
                "client_secret": "y",
                "refresh_token": "z",
            }  # fmt: skip
        )
    )
    env = {
        **os.environ,
        "GOOGLE_APPLICATION_CREDENTIALS": str(creds),
        "NO_GCE_CHECK": "True",
        "HTTPS_PROXY": UNREACHABLE,
        "https_proxy": UNREACHABLE,
    }
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    argv = fill(["run-vertex", *VERTEX_OK, "--pipeline", "{pushed_vertex}", *GOOD], tmp_path,
                pushed_compiled_dir)  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "spottrain.pipelines", *argv], capture_output=True, text=True,
        env=env,
    )  # fmt: skip
    assert result.returncode == 69, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert "Vertex AI in us-central1 is unreachable: 127.0.0.1:9 (via proxy" in result.stderr
    assert time.monotonic() - started < 15


def test_make_gke_computeclass_execute_without_a_cluster_is_one_line(tmp_path):
    result = subprocess.run(
        ["make", "--no-print-directory", "gke-computeclass", "EXECUTE=1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)},
    )
    assert result.returncode != 0
    assert result.stderr.splitlines()[0].startswith("error: --execute needs a cluster: no usable")
    assert "apiVersion" not in result.stdout
