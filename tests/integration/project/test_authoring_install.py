"""A newcomer's path, run as docs/own-pipeline.md writes it, in an install without TensorFlow.

The page's install line (``pip install "spottrain[pipelines] @ git+<url>@<commit>"``)
runs against a git copy of this working tree as the URL; then its own pipeline with our
components on the user's image is compiled and submitted to a KFP API stand-in
(``tests/kfp_api.py``) with a task of the user's own (README's ``KerasTask``), which the
pre-flight reads from its source. The shipped pipelines compile and submit from the
same install. pip resolves the dependencies from the package index (its own cache
makes a second run quicker): hence the ``network`` marker.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from kfp_api import KfpApi

REPO = Path(__file__).resolve().parents[3]
PAGE = (REPO / "docs" / "own-pipeline.md").read_text()
IMAGE = "registry.example.com/team/spottrain:1.0"
DOC_URL = "https://github.com/my-org/spottrain"
DOC_HOST = "https://my-kfp.example.com"

pytestmark = [
    pytest.mark.network,
]


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", PAGE, re.S)


def _commands(block: str) -> list[str]:
    return [ln for ln in block.replace("\\\n", " ").splitlines() if ln.strip()]


def _env(tmp: Path) -> dict[str, str]:
    # The shell's python3 is this interpreter's; nothing of the test venv leaks in.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env.update(CLOUDSDK_CONFIG=str(tmp / "gcloud"), GOOGLE_APPLICATION_CREDENTIALS="")
    return env


def _git_copy(dst: Path) -> str:
    """This working tree (tracked and new files, as a pip git URL would see a push) as a
    git repository at ``dst``; returns its commit."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
        capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file() and not src.is_symlink():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(dst)]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "copy"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return subprocess.run(
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture(scope="module")
def authoring(tmp_path_factory) -> Path:
    """The page's install commands, as written but for the URL; returns their folder."""
    tmp = tmp_path_factory.mktemp("authoring")
    commit = _git_copy(tmp / "fork")
    # The install from a fork's URL (the page's other one, from a local clone, is what
    # this one becomes below: a file://localhost URL).
    (install,) = [b for b in _blocks("sh") if "pip install" in b and DOC_URL in b]
    # pip's own cache (~/.cache/pip) is reused; byte-compiling the ~360 MB it installs is
    # left to the first imports (the command is the page's; only pip's settings differ).
    env = {**_env(tmp), "PIP_NO_COMPILE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    start = time.monotonic()
    for line in _commands(install):
        # A host in the URL: pip's requirement parser refuses git+file:/// (no netloc).
        line = line.replace(DOC_URL, f"file://localhost{tmp}/fork")
        line = re.sub(r"@[0-9a-f]{40}\b", f"@{commit}", line)
        done = subprocess.run(
            ["bash", "-c", line], cwd=tmp, env=env, capture_output=True, text=True,
            timeout=1200,
        )  # fmt: skip
        assert done.returncode == 0, (line, done.stderr[-3000:])
    print(f"authoring install: {time.monotonic() - start:.0f} s")  # the closing note's figure
    return tmp


def _kfp_api():
    KfpApi.requests, KfpApi.existing = [], {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), KfpApi)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def _posted_runs() -> list[bytes]:
    runs = "/apis/v2beta1/runs"
    return [r[2] for r in KfpApi.requests if r[0] == "POST" and r[1].startswith(runs)]


def _cli(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(tmp / "authoring" / "bin" / "python"), "-m", "spottrain.pipelines", *args],
        capture_output=True, text=True, cwd=tmp, env=_env(tmp), timeout=300,
    )  # fmt: skip


def test_the_install_has_no_tensorflow(authoring):
    python = str(authoring / "authoring" / "bin" / "python")
    missing = subprocess.run([python, "-c", "import tensorflow"], capture_output=True, text=True)
    assert missing.returncode == 1 and "No module named 'tensorflow'" in missing.stderr
    venv = str(authoring / "authoring")
    size = subprocess.run(["du", "-sm", venv], capture_output=True, text=True)
    print(f"authoring venv: {size.stdout.split()[0]} MB")  # the closing note's figure


def test_own_pipeline_on_own_image_compiles_and_submits_as_the_page_says(authoring):
    """README's KerasTask as my_tasks.py, the page's pipeline and commands, as written."""
    readme = (REPO / "README.md").read_text()
    (task,) = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "KerasTask" in b]
    (authoring / "my_tasks.py").write_text(task)
    (pipeline,) = [b for b in _blocks("python") if "def my_pipeline(" in b]
    (authoring / "my_pipeline.py").write_text(pipeline)
    doc_image = re.search(r'IMAGE = "([^"]+)"', pipeline).group(1)
    (commands,) = [b for b in _blocks("sh") if "my_pipeline.py" in b]
    server, host = _kfp_api()
    try:
        for line in _commands(commands):
            done = subprocess.run(
                ["bash", "-c", line.replace(DOC_HOST, host)], cwd=authoring,
                env=_env(authoring), capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert done.returncode == 0, (line, done.stdout + done.stderr)
    finally:
        server.shutdown()
    compiled = (authoring / "my_pipeline.yaml").read_text()
    assert doc_image in compiled and "us-docker.pkg.dev/spottrain" not in compiled
    (run,) = _posted_runs()
    assert doc_image.encode() in run and b"gs://my-bucket/ckpt/run1" in run
    # The task was read from its source, said in one line, once (the CLI's and
    # submit's pre-flights both ran).
    notes = [ln for ln in done.stderr.splitlines() if "pre-flight: task" in ln]
    assert len(notes) == 1, done.stderr
    assert "'my_tasks:Classifier' read from its source: a KerasTask" in notes[0]
    assert "docker run IMAGE --check --task my_tasks:Classifier" in notes[0]


def _run_own(tmp: Path, *params: str) -> subprocess.CompletedProcess:
    server, host = _kfp_api()
    try:
        return _cli(tmp, "run-gke", "--host", host, "--pipeline", "my_pipeline.yaml",
                    "src=gs://my-bucket/images", *params)  # fmt: skip
    finally:
        server.shutdown()


def test_the_pre_flight_without_tensorflow_refuses_only_what_cannot_run(authoring):
    if not (authoring / "my_pipeline.yaml").exists():
        pytest.skip("needs the compiled pipeline of the test above")
    ckpt = "ckpt=gs://my-bucket/ckpt/run1"
    (authoring / "wrong_tasks.py").write_text(
        "import keras\nfrom spottrain import Task\n\n\n"
        "class Mine(Task):\n    def model(self):\n        return keras.Sequential()\n\n"
        "    def examples(self):\n        return None\n"
    )
    done = _run_own(authoring, ckpt, "task=wrong_tasks:Mine")
    assert done.returncode == 2 and not _posted_runs(), done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "Mine (" in line and "subclasses Task but does not define build_model()" in line
    assert "it defines model(), examples(), which are KerasTask's" in line

    # Only in the image: one line, once, and submitted.
    done = _run_own(authoring, ckpt, "task=only_in_my_image.tasks:Mine")
    assert done.returncode == 0 and len(_posted_runs()) == 1, done.stderr
    notes = [ln for ln in done.stderr.splitlines() if "pre-flight: task" in ln]
    assert len(notes) == 1 and "is not importable here" in notes[0], done.stderr

    # The checkpoint dir is the pipeline's own parameter, named as it is.
    done = _run_own(authoring, "ckpt=/tmp/c")
    assert done.returncode == 2, done.stderr
    assert "error: ckpt='/tmp/c' is not persistent" in done.stderr


def test_the_shipped_pipelines_compile_and_submit_from_the_install(authoring):
    tmp = authoring
    job = tmp / "job.yaml"
    done = _cli(tmp, "compile", "--target", "gke-job", "--pool", "spot",
                "--image", IMAGE, "--out", str(job))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert IMAGE in job.read_text()
    vertex = tmp / "vertex.yaml"
    done = _cli(tmp, "compile", "--target", "vertex", "--image", IMAGE,
                "--fallback-strategy", "STANDARD", "--out", str(vertex))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "spottrain.runtime.vertex_job" in vertex.read_text()

    server, host = _kfp_api()
    try:
        params = ("data_src=gs://my-bucket/d", "checkpoint_dir=gs://my-bucket/c")
        done = _cli(tmp, "run-gke", "--host", host, "--pipeline", str(job), *params)
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = _posted_runs()
    assert IMAGE.encode() in run
    # Vertex: everything up to the credentials, which this machine has none of (78).
    done = _cli(tmp, "run-vertex", "--project", "my-project", "--region", "us-central1",
                "--bucket", "my-bucket", "--pipeline", str(vertex),
                "data_src=gs://my-bucket/d", "checkpoint_dir=gs://my-bucket/c")  # fmt: skip
    assert done.returncode == 78 and "credentials" in done.stderr.lower(), done.stderr
    assert "tensorflow" not in done.stderr.lower()
