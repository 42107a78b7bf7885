"""Packaging, image and tooling invariants users rely on."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


BIN = Path(sys.executable).parent


def test_wheel_installs_only_trainer_and_spottrain(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("spottrain-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"spottrain"}, top
    # The compiled component YAMLs travel with the package.
    assert "spottrain/components/train/component.yaml" in names
    assert "spottrain/trainer/task.py" in names and "spottrain/pipelines/__init__.py" in names
    # Test and demo helpers are not installed in the image.
    assert not [n for n in names if n.startswith("spottrain/testing/")]
    # The image (`pip install .`) gets the runtime only; authoring tools are an extra.
    (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    requires = [
        ln.split(":", 1)[1].strip()
        for ln in zipfile.ZipFile(wheel).read(meta).decode().splitlines()
        if ln.startswith("Requires-Dist:")
    ]
    base = {r.split(";")[0].split("<")[0].split(">")[0].strip() for r in requires if ";" not in r}
    assert {"kfp", "google-cloud-storage"} <= base
    # Neither TensorFlow (the image's, an extra) nor the authoring tools are for everyone.
    assert not base & {
        "tensorflow",
        "tensorflow-datasets",
        "google-cloud-pipeline-components",
        "google-cloud-aiplatform",
        "kfp-kubernetes",
        "google-cloud-billing",  # the cost figures' catalog client: the image's `pricing` extra
    }
    assert any(r.startswith("google-cloud-billing") and 'extra == "pricing"' in r for r in requires)
    assert any(
        r.split(";")[0].rstrip("<>=.,0123456789 ") == "tensorflow" and 'extra == "trainer"' in r
        for r in requires
    ), requires
    assert any(
        r.startswith("google-cloud-pipeline-components") and 'extra == "pipelines"' in r
        for r in requires
    )


def test_hadolint_passes():
    proc = subprocess.run(
        [str(BIN / "hadolint"), "Dockerfile", "examples/Dockerfile"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_lint_and_format_clean():
    for args in (["check", "."], ["format", "--check", "."]):
        proc = subprocess.run([str(BIN / "ruff"), *args], cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_make_help_lists_the_targets_users_expect():
    out = subprocess.run(
        ["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)  # strip the colours
    for target in ("run", "test", "lint", "venv", "compile", "bench"):
        assert re.search(rf"^\s+{target}\s", out, re.M), f"make help lacks {target}:\n{out}"
