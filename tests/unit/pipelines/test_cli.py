"""The pipelines CLI and Makefile targets, up to (and including) real client requests.

The in-process tests; those that start processes are in
tests/integration/pipelines/test_cli.py.
"""

import datetime
import json
import time

import pytest
from kfp_api import run_cli

from spottrain import placement
from spottrain.pipelines import __main__ as cli
from spottrain.pipelines import compile as comp
from spottrain.pipelines import placement as nodepools
from spottrain.pipelines import submit
from spottrain.version import IMAGE

GKE = comp.COMPILED_DIR / comp.GKE_YAML


VERTEX = comp.COMPILED_DIR / comp.VERTEX_YAML


# kfp.Client warns about server versions on every construction.
pytestmark = pytest.mark.filterwarnings("ignore:This client only works:FutureWarning")


def test_upload_creates_a_new_pipeline(kfp_api, capsys):
    api, host = kfp_api
    code, out, _ = run_cli("upload", "--host", host, "--name", "spot", capsys=capsys)
    assert code == 0 and "pipeline_id=p-new" in out
    [upload] = [r for r in api.requests if r[0] == "POST"]
    assert upload[1].startswith("/apis/v2beta1/pipelines/upload?")
    assert b"spottrain-gke-preemptible" in upload[2]  # the compiled YAML is the body


def test_namespace_reaches_uploads_and_runs(kfp_api, capsys):
    api, host = kfp_api
    code, _, _ = run_cli("upload", "--host", host, "--namespace", "team-a", capsys=capsys)
    assert code == 0
    [upload] = [r for r in api.requests if r[0] == "POST"]
    assert "namespace=team-a" in upload[1]
    code, _, _ = run_cli(
        "run-gke", "--host", host, "--namespace", "team-a", "data_src=gs://my-bucket/d",
        "checkpoint_dir=gs://my-bucket/c", capsys=capsys,
    )  # fmt: skip
    assert code == 0
    experiments = [r for r in api.requests if r[1].startswith("/apis/v2beta1/experiments")]
    assert experiments and all("team-a" in r[1] for r in experiments), experiments


def test_upload_adds_a_version_to_an_existing_pipeline(kfp_api, capsys):
    api, host = kfp_api
    api.existing = {"spot": "p1"}
    code, out, _ = run_cli(
        "upload", "--host", host, "--name", "spot", "--version", "v-7", capsys=capsys
    )
    assert code == 0 and "version_id=v2" in out
    [upload] = [r for r in api.requests if r[0] == "POST"]
    assert "upload_version" in upload[1] and "v-7" in upload[1] and "pipelineid=p1" in upload[1]


def test_run_creates_a_run_with_converted_parameters(kfp_api, capsys):
    api, host = kfp_api
    code, out, _ = run_cli(
        "run-gke", "--host", host, "data_src=gs://my-bucket/d",
        "checkpoint_dir=gs://my-bucket/c", "train_steps=77",
        capsys=capsys,
    )  # fmt: skip
    assert code == 0 and "run_id=r1" in out
    [run] = [json.loads(r[2]) for r in api.requests if r[1].startswith("/apis/v2beta1/runs")]
    params = run["runtime_config"]["parameters"]
    assert params["train_steps"] == 77 and params["checkpoint_dir"] == "gs://my-bucket/c"
    # Both documents travel: the PipelineSpec and the kfp-kubernetes platform spec.
    # The JobSet engine is the default for GPUs (ENGINE=pod: the in-pod train).
    name = run["pipeline_spec"]["pipeline_spec"]["pipelineInfo"]["name"]
    assert name == "spottrain-gke-preemptible-job"
    assert "kubernetes" in run["pipeline_spec"]["platform_spec"]["platforms"]


def test_upload_and_run_pick_the_yaml_of_the_pool(kfp_api, capsys):
    api, host = kfp_api
    code, out, _ = run_cli(
        "upload", "--host", host, "--pool", "spot", "--engine", "pod", capsys=capsys
    )
    assert code == 0 and "pipeline_id=p-new" in out
    [upload] = [r for r in api.requests if r[0] == "POST"]
    assert "name=spottrain-gke-spot&" in upload[1] + "&"  # the template's own name
    assert b"cloud.google.com/gke-spot" in upload[2]
    assert b"cloud.google.com/gke-preemptible" not in upload[2]
    code, out, _ = run_cli(
        "run-gke", "--host", host, "--pool", "spot", "--fallback", "data_src=gs://my-bucket/d",
        "checkpoint_dir=gs://my-bucket/c", capsys=capsys,
    )  # fmt: skip
    assert code == 0
    [run] = [json.loads(r[2]) for r in api.requests if r[1].startswith("/apis/v2beta1/runs")]
    spec = run["pipeline_spec"]
    assert spec["pipeline_spec"]["pipelineInfo"]["name"] == "spottrain-gke-spot-fallback"
    executors = spec["platform_spec"]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert executors["exec-train"]["nodeSelector"]["labels"]["cloud.google.com/gke-spot"] == "true"


def test_run_guard_fails_before_any_request(kfp_api, capsys):
    api, host = kfp_api
    code, _, err = run_cli(
        "run-gke",
        "--host",
        host,
        "data_src=gs://my-bucket/d",
        "checkpoint_dir=/tmp/c",
        capsys=capsys,
    )
    assert code == cli.ERROR_EXIT
    assert err.strip().startswith("error: checkpoint_dir='/tmp/c' is not persistent")
    assert api.requests == []


def test_the_placeholder_image_is_refused_before_any_request(kfp_api, capsys):
    api, host = kfp_api
    for argv in (
        ["upload", "--host", host],
        ["run-gke", "--host", host, "data_src=gs://my-bucket/d", "checkpoint_dir=gs://my-bucket/c"],
    ):
        code, _, err = run_cli(*argv, "--pipeline", str(GKE), capsys=capsys)
        assert code == cli.ERROR_EXIT and err.count("\n") == 1, err
        assert f"runs the placeholder image '{IMAGE}'" in err and "make image IMAGE=" in err
    code, _, err = run_cli(
        "run-vertex", "--project", "my-project", "--region", "us-central1", "--bucket", "b-1",
        "--pipeline", str(VERTEX), "data_src=gs://my-bucket/d",
        "checkpoint_dir=gs://my-bucket/c", capsys=capsys,
    )  # fmt: skip
    assert code == cli.ERROR_EXIT and f"placeholder image '{IMAGE}'" in err, err
    assert api.requests == []
    # The same pipelines compiled against a pushed image go through.
    code, out, _ = run_cli("upload", "--host", host, capsys=capsys)
    assert code == 0 and api.requests


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["upload"], "HOST is empty"),
        (["run-gke", "--host", "http://x", "data_src=gs://a", "checkpoint_dir"], "not name=value"),
        (["run-vertex", "--region", "r", "--bucket", "b"], "PROJECT is empty"),
        (["nodepool", "--zone", "z"], "cluster is empty"),
        (["compile", "--target", "vertex", "--out", "/dev/null", "--timeout", "0s"], "timeout"),
        (["compile", "--target", "gke"], "--target needs --out"),
        (
            ["compile", "--target", "gke", "--out", "/dev/null", "--retry-window", "3600s"],
            "retry_window='3600s' is shorter than the run timeout '604800s'",
        ),
    ],
)
def test_missing_or_bad_arguments_get_one_line_errors(argv, needle, capsys):
    code, _, err = run_cli(*argv, capsys=capsys)
    assert code == cli.ERROR_EXIT
    assert needle in err and err.count("\n") == 1


def test_run_vertex_builds_the_job_up_to_submit():
    from google.auth.credentials import AnonymousCredentials

    job = submit.vertex_job(
        VERTEX,
        {"data_src": "gs://my-bucket/d", "checkpoint_dir": "/gcs/b/c"},
        project="p",
        region="europe-west4",
        bucket="gs://my-bucket/runs",
        credentials=AnonymousCredentials(),
    )
    assert (
        job._gca_resource.runtime_config.gcs_output_directory == "gs://my-bucket/runs/pipeline-root"
    )
    with pytest.raises(submit.SubmitError, match="platform section"):
        submit.vertex_job(GKE, {}, project="p", region="r", bucket="b")


def test_compile_custom_targets(tmp_path, capsys):
    out = tmp_path / "spot.yaml"
    code, _, _ = run_cli(
        "compile", "--target", "gke", "--out", str(out), "--pool", "spot", "--gpus", "2",
        "--retries", "9", "--image", "example.com/t:1", capsys=capsys,
    )  # fmt: skip
    assert code == 0
    text = out.read_text()
    assert "maxRetryCount: 9" in text and "cloud.google.com/gke-spot" in text
    assert "example.com/t:1" in text
    code, _, err = run_cli(
        "compile", "--target", "gke", "--out", str(out), "--image", "tensorflow/tensorflow:2.21.0",
        capsys=capsys,
    )  # fmt: skip
    assert code == cli.ERROR_EXIT and "CPU-only" in err


def test_nodepool_command_matches_the_placement_taint():
    cmd = nodepools.nodepool_command(placement.Placement(), cluster="c", zone="z")
    assert "--preemptible" in cmd
    assert f"--node-taints={placement.PREEMPTIBLE_TAINT}" in cmd
    assert "--node-taints=preemptible=true:NoSchedule" in cmd
    assert any(a.startswith("--accelerator=type=nvidia-tesla-t4,count=1") for a in cmd)
    assert "--enable-autoscaling" in cmd and "--min-nodes=0" in cmd
    with pytest.raises(placement.PlacementError, match="min_nodes=3, max_nodes=2"):
        nodepools.nodepool_command(
            placement.Placement(), cluster="c", zone="z", min_nodes=3, max_nodes=2
        )


def test_a_reservation_goes_on_an_on_demand_pool_only():
    od = placement.Placement(pool="on-demand")
    cmd = nodepools.nodepool_command(
        od, cluster="c", zone="z", reservation="r1", reservation_project="shared"
    )
    assert cmd[-4:-2] == ["--reservation-affinity=specific",
                          "--reservation=projects/shared/reservations/r1"]  # fmt: skip
    for pool in ("spot", "preemptible"):
        with pytest.raises(placement.PlacementError, match="cannot consume reservations"):
            nodepools.nodepool_command(
                placement.Placement(pool=pool), cluster="c", zone="z", reservation="r1"
            )


def test_a_longer_grace_off_spot_or_an_unknown_one_is_refused():
    for pool in ("preemptible", "on-demand"):
        with pytest.raises(placement.PlacementError, match="Spot node pools only"):
            nodepools.nodepool_command(
                placement.Placement(pool=pool), cluster="c", zone="z", spot_grace_seconds=120
            )
    with pytest.raises(placement.PlacementError, match="spot grace 60 s: GKE accepts 30 or 120"):
        nodepools.nodepool_command(
            placement.Placement(pool="spot"), cluster="c", zone="z", spot_grace_seconds=60
        )
    plain = nodepools.nodepool_command(placement.Placement(pool="spot"), cluster="c", zone="z")
    assert not any(f.startswith("--system-config-from-file") for f in plain)


@pytest.mark.parametrize(
    "flags, template",
    [
        ([], "spottrain_gke_preemptible_job.yaml"),
        (["--engine", "pod"], "spottrain_gke_preemptible.yaml"),
        (["--fallback"], "spottrain_gke_preemptible_fallback.yaml"),
        (["--pool", "spot", "--engine", "job"], "spottrain_gke_spot_job.yaml"),
    ],
)
def test_engine_picks_the_job_or_in_pod_variant(flags, template):
    args = cli.parser().parse_args(["upload", "--host", "h", *flags])
    assert cli._gke_template(args).name == template


def test_rbac_execute_without_kubectl_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")
    code, _, err = run_cli("rbac", "--execute", capsys=capsys)
    assert code == 2 and err.strip() == "error: --execute needs kubectl on PATH"


def test_run_gke_dry_run_prints_the_very_body_a_run_sends_and_sends_nothing(kfp_api, capsys):
    """--dry-run needs no KFP: the pre-flight, then the body KFP's client would POST,
    built by that client's own code (compared with the one it POSTs here)."""
    api, host = kfp_api
    argv = ["run-gke", "--run-name", "r-1", "data_src=gs://my-bucket/d",
            "checkpoint_dir=gs://my-bucket/c", "train_steps=77"]  # fmt: skip
    code, out, err = run_cli(*argv, "--dry-run", capsys=capsys)
    assert code == 0 and api.requests == [], err
    assert err.startswith("dry run: nothing was sent; the pre-flight passed; not checked:")
    dry = json.loads(out)
    code, _, _ = run_cli(*argv, "--host", host, capsys=capsys)
    assert code == 0
    [sent] = [json.loads(r[2]) for r in api.requests if r[1].startswith("/apis/v2beta1/runs")]
    for key in ("display_name", "pipeline_spec", "runtime_config"):
        assert dry[key] == sent[key], key
    assert dry["runtime_config"]["parameters"]["train_steps"] == 77
    assert dry["experiment"] == "spottrain"


def test_a_dry_run_still_refuses_what_the_pre_flight_refuses(kfp_api, capsys):
    code, out, err = run_cli(
        "run-gke", "--dry-run", "data_src=gs://my-bucket/d", "checkpoint_dir=/tmp/c",
        capsys=capsys,
    )  # fmt: skip
    assert code == cli.ERROR_EXIT and out == "" and "is not persistent" in err


def test_run_vertex_dry_run_prints_the_pipeline_job_without_credentials(
    kfp_api, capsys, monkeypatch
):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/key.json")
    code, out, err = run_cli(
        "run-vertex", "--dry-run", "--project", "my-project", "--region", "us-central1",
        "--bucket", "b-1", "--service-account", "sa@my-project.iam.gserviceaccount.com",
        "data_src=gs://my-bucket/d", "checkpoint_dir=/gcs/b-1/c", capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    assert "not checked: your credentials and Vertex AI in us-central1" in err
    job = json.loads(out)
    assert job["runtimeConfig"]["gcsOutputDirectory"] == "gs://b-1/pipeline-root"
    assert job["runtimeConfig"]["parameterValues"]["data_src"] == "gs://my-bucket/d"
    assert job["serviceAccount"] == "sa@my-project.iam.gserviceaccount.com"
    assert job["pipelineSpec"]["pipelineInfo"]["name"].startswith("spottrain")


def test_run_vertex_makes_a_finish_by_duration_its_time_and_refuses_a_bad_one(
    kfp_api, capsys, monkeypatch, tmp_path
):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/key.json")
    base = ("run-vertex", "--dry-run", "--fallback", "--project", "my-project", "--region",
            "us-central1", "--bucket", "b-1", "data_src=gs://my-bucket/d")  # fmt: skip
    ckpt = f"checkpoint_dir=/gcs/b-1/{tmp_path.name}"
    before = time.time()
    code, out, err = run_cli(*base, ckpt, "finish_by=6h", capsys=capsys)
    assert code == 0, err
    sent = json.loads(out[out.index("{") :])["runtimeConfig"]["parameterValues"]["finish_by"]
    when = datetime.datetime.fromisoformat(sent.replace("Z", "+00:00")).timestamp()
    assert before + 6 * 3600 - 1 <= when <= time.time() + 6 * 3600, sent
    assert f"finish_by='6h': the run is to finish by {sent}" in out
    # A time with its zone goes as given; bad ones are one line each, nothing sent.
    month = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 30 * 86400))
    code, out, err = run_cli(*base, ckpt, f"finish_by={month}", capsys=capsys)
    assert code == 0 and f'"finish_by": "{month}"' in out, err
    for bad, word in (("finish_by=soon", "expected a duration"),
                      ("finish_by=2099-01-01T00:00", "no time zone"),
                      ("finish_by=0", "finish_by='0' is less than a minute away"),
                      ("finish_by=99999999999999999999d", "is more than a year away"),
                      ("finish_by=2099-01-01T00:00:00Z", "is more than a year away"),
                      ('ladder=[{"capacity": "cheap"}]', "capacity='cheap'")):  # fmt: skip
        code, out, err = run_cli(*base, ckpt, bad, capsys=capsys)
        assert code == cli.ERROR_EXIT and out == "" and word in err, (bad, err)
        assert len(err.strip().splitlines()) == 1, err
    # The pipeline without the fall-back has no such parameter: refused as unknown.
    code, out, err = run_cli(*[a for a in base if a != "--fallback"], ckpt, "finish_by=6h",
                             capsys=capsys)  # fmt: skip
    assert code == cli.ERROR_EXIT and "finish_by" in err, err
