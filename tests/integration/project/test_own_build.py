"""A user's own build: our components on their image, their own pipeline's parameter
names, ``make compile IMAGE=…`` apart from the committed YAML, and the data layout the
docs promise (docs/own-pipeline.md, docs/deploy.md).

The whole newcomer's path in an install without TensorFlow is
tests/integration/project/test_authoring_install.py; these run in the test venv."""

import shutil
import subprocess
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import yaml
from kfp_api import KfpApi

from spottrain.pipelines import compile as comp
from spottrain.pipelines import templates
from spottrain.version import IMAGE

REPO = Path(__file__).resolve().parents[3]


MINE = "europe-west4-docker.pkg.dev/my-project/ml/trainer:2.0"


def _make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [shutil.which("make"), "--no-print-directory", *args],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def _committed() -> dict[Path, bytes]:
    files = [*comp.COMPONENTS_DIR.glob("*/component.yaml"), *comp.COMPILED_DIR.glob("*.yaml")]
    return {p: p.read_bytes() for p in files}


def test_make_compile_with_an_image_is_the_users_build_and_run_gke_sends_it(tmp_path):
    before = _committed()
    try:
        done = _make("compile", f"IMAGE={MINE}", f"OUT={tmp_path}")
        assert done.returncode == 0, done.stderr
        assert _committed() == before, "make compile IMAGE=... rewrote the committed YAML"
    finally:  # whatever happened, the committed YAML is left as it was
        for path, data in before.items():
            path.write_bytes(data)
    build = tmp_path / "yaml"
    for path in before:
        spec = next(yaml.safe_load_all((build / comp.repo_path(path)).read_text()))
        assert MINE in templates.images(spec) and not templates.placeholder_images(spec), path
    # make run-gke sends the build: its command names it, and the run carries the image.
    dry = _make("-n", "run-gke", "HOST=http://h", f"OUT={tmp_path}", "data_src=gs://my-bucket/d")
    assert f'--yaml-dir "{build}"' in dry.stdout, dry.stdout
    from spottrain.pipelines import __main__ as cli

    KfpApi.requests, KfpApi.existing = [], {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), KfpApi)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        host = f"http://127.0.0.1:{server.server_address[1]}"
        params = ["data_src=gs://my-bucket/d", "checkpoint_dir=gs://my-bucket/c"]
        code = cli.main(["run-gke", "--host", host, "--pool", "spot", "--yaml-dir", str(build),
                         *params])  # fmt: skip
    finally:
        server.shutdown()
    assert code == 0
    (run,) = [r for r in KfpApi.requests if r[0] == "POST" and "/runs" in r[1]]
    assert MINE.encode() in run[2] and IMAGE.encode() not in run[2]
