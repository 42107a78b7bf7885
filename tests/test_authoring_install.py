"""A pipeline author's install, ``spottrain[pipelines]``, has no TensorFlow and still
compiles and submits: the wheel into a fresh venv (pip, from PyPI), then the CLI
compiles the Job-engine and Vertex pipelines for an image and submits one to a KFP
API stand-in (``test_cli.KfpApi``), all without TensorFlow."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from test_cli import KfpApi

REPO = Path(__file__).resolve().parents[1]
IMAGE = "registry.example.com/team/spottrain:1.0"


@pytest.fixture(scope="module")
def authoring_venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("authoring")
    leftovers = [p for p in (REPO / "build", REPO / "spottrain.egg-info") if not p.exists()]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp / "wheel"), str(REPO)],
        check=True, capture_output=True,
    )  # fmt: skip
    for path in leftovers:  # what the in-tree build left: a later wheel would reuse it
        shutil.rmtree(path, ignore_errors=True)
    (wheel,) = (tmp / "wheel").glob("spottrain-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    done = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
         f"spottrain[pipelines] @ {wheel.as_uri()}"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return venv


def _cli(venv: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(CLOUDSDK_CONFIG=str(tmp_path / "gcloud"), GOOGLE_APPLICATION_CREDENTIALS="")
    return subprocess.run(
        [str(venv / "bin" / "python"), "-m", "spottrain.pipelines", *args],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip


def test_the_authoring_install_has_no_tensorflow_and_compiles_and_submits(authoring_venv, tmp_path):
    python = str(authoring_venv / "bin" / "python")
    missing = subprocess.run(
        [python, "-c", "import tensorflow"], capture_output=True, text=True, cwd=tmp_path
    )
    assert missing.returncode == 1 and "No module named 'tensorflow'" in missing.stderr
    size = subprocess.run(["du", "-sm", str(authoring_venv)], capture_output=True, text=True)
    print(f"authoring venv: {size.stdout.split()[0]} MB")  # the closing note's figure

    job = tmp_path / "job.yaml"
    done = _cli(authoring_venv, tmp_path, "compile", "--target", "gke-job", "--pool", "spot",
                "--image", IMAGE, "--out", str(job))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert IMAGE in job.read_text()
    vertex = tmp_path / "vertex.yaml"
    done = _cli(authoring_venv, tmp_path, "compile", "--target", "vertex", "--image", IMAGE,
                "--fallback-strategy", "STANDARD", "--out", str(vertex))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "spottrain.runtime.vertex_job" in vertex.read_text()

    # Submitted to KFP (the API stand-in): the run carries the compiled YAML.
    KfpApi.requests, KfpApi.existing = [], {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), KfpApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host = f"http://127.0.0.1:{server.server_address[1]}"
        params = ("data_src=gs://my-bucket/d", "checkpoint_dir=gs://my-bucket/c")
        done = _cli(authoring_venv, tmp_path, "run-gke", "--host", host, "--pipeline", str(job),
                    *params)  # fmt: skip
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stdout + done.stderr
    runs = [r for r in KfpApi.requests if r[0] == "POST" and r[1].startswith("/apis/v2beta1/runs")]
    assert len(runs) == 1 and IMAGE.encode() in runs[0][2]
    # Vertex: everything up to the credentials, which this machine has none of (78).
    done = _cli(authoring_venv, tmp_path, "run-vertex", "--project", "my-project",
                "--region", "us-central1", "--bucket", "my-bucket", "--pipeline", str(vertex),
                "data_src=gs://my-bucket/d", "checkpoint_dir=gs://my-bucket/c")  # fmt: skip
    assert done.returncode == 78 and "credentials" in done.stderr.lower(), done.stderr
    assert "tensorflow" not in done.stderr.lower()
