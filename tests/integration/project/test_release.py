"""``make release-files``, ``make release`` and ``compile --out-dir``, run for real.

``make release-files`` builds this version's wheel and its YAML for a registry into
a temporary DIST: the versioned image in every file, the committed YAML untouched,
no in-tree build left behind. ``make release`` refuses without docker before it
builds anything, and its dry run builds and pushes the image the YAML names.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
import zipfile
from email.parser import Parser
from pathlib import Path
from types import SimpleNamespace

import pytest

from spottrain.pipelines import __main__ as cli
from spottrain.pipelines import compile as comp
from spottrain.pipelines import templates
from spottrain.version import IMAGE, IMAGE_REPO, __version__

REPO = Path(__file__).resolve().parents[3]


REGISTRY = "example.com/p/r"


RELEASE_IMAGE = f"{REGISTRY}/trainer:{__version__}"


WHEEL = f"spottrain-{__version__}-py3-none-any.whl"


# make's own note after a failed recipe, e.g. "make: *** [Makefile:150: release] Error 2"
MAKE_NOTE = re.compile(r"^make(\[\d+\])?: \*\*\* ")


def make(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    # Without the variables an outer `make test REGISTRY=...` or the shell would pass on.
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "REGISTRY", "DIST")}  # fmt: skip
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [shutil.which("make"), "--no-print-directory", *args],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip


def own_lines(stderr: str) -> list[str]:
    """What the recipe itself printed to stderr, without make's closing note."""
    return [line for line in stderr.splitlines() if not MAKE_NOTE.match(line)]


def committed() -> dict[Path, tuple[bytes, int]]:
    """The committed YAML files' bytes and modification times."""
    files = [*comp.COMPONENTS_DIR.glob("*/component.yaml"), *comp.COMPILED_DIR.glob("*.yaml")]
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files}


def in_tree_build() -> list[Path]:
    return [p for p in (REPO / "build", *REPO.glob("*.egg-info")) if p.exists()]


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """``make release-files`` once, after planting what a stale in-tree build leaves."""
    dist = tmp_path_factory.mktemp("dist")
    before = committed()
    build = REPO / "build"
    planted = not build.exists()
    # A module deleted since an earlier build: pip would ship it from build/lib.
    stale = build / "lib" / "spottrain" / "stale_leftover.py"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("")
    try:
        start = time.monotonic()
        result = make("release-files", f"REGISTRY={REGISTRY}", f"DIST={dist}")
        seconds = time.monotonic() - start
        left = in_tree_build()
    finally:
        stale.unlink(missing_ok=True)
        if planted:
            shutil.rmtree(build, ignore_errors=True)
    print(f"make release-files: {seconds:.1f} s")
    return SimpleNamespace(
        result=result, out=dist / __version__, before=before, after=committed(), left=left
    )


def test_release_files_builds_the_wheel_of_this_version(release):
    assert release.result.returncode == 0, release.result.stderr
    wheel = release.out / WHEEL
    assert [p.name for p in release.out.glob("*.whl")] == [WHEEL]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = Parser().parsestr(z.read(f"spottrain-{__version__}.dist-info/METADATA").decode())
    assert metadata["Name"] == "spottrain" and metadata["Version"] == __version__
    assert "spottrain/stale_leftover.py" not in names  # build/ went before the wheel
    assert "spottrain/pipelines/compile.py" in names
    assert release.result.stdout.splitlines()[-1] == (
        f"release {__version__}: {wheel}, {release.out}/yaml/, image {RELEASE_IMAGE}"
    )


def test_release_files_yaml_runs_the_versioned_image(release):
    assert release.result.returncode == 0, release.result.stderr
    yaml_dir = release.out / "yaml"
    rendered = comp.render_all(RELEASE_IMAGE)
    written = {p.relative_to(yaml_dir) for p in yaml_dir.rglob("*") if p.is_file()}
    assert written == {p.relative_to(REPO) for p in rendered}  # the committed set, no more
    for source, text in rendered.items():
        path = yaml_dir / source.relative_to(REPO)
        release_text = path.read_text()
        assert comp.same_yaml(release_text, text), path
        assert IMAGE not in release_text and IMAGE_REPO not in release_text, path
        # The placeholder becomes the release image; others (GCPC's Vertex launcher)
        # stay as committed.
        images = templates.images(templates.load_template(path)[0])
        was = templates.images(templates.load_template(source)[0])
        assert RELEASE_IMAGE in images, path
        assert images == [RELEASE_IMAGE if i == IMAGE else i for i in was], path


def test_release_files_leaves_the_repository_as_it_was(release):
    assert release.result.returncode == 0, release.result.stderr
    assert release.after == release.before  # bytes and mtimes: not even rewritten
    assert release.left == []  # no build/ or *.egg-info for a later wheel to pick up


def test_release_files_needs_a_registry(tmp_path):
    result = make("release-files", f"DIST={tmp_path}")
    assert result.returncode == 2
    assert own_lines(result.stderr) == [
        "make release-files: REGISTRY is required, e.g. make release-files "
        "REGISTRY=us-central1-docker.pkg.dev/my-project/spottrain"
    ]
    assert list(tmp_path.iterdir()) == []


def test_release_without_docker_refuses_before_building(tmp_path):
    # A PATH with sed (the Makefile reads the version with it) and no docker, also on
    # machines that have docker.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sed").symlink_to(shutil.which("sed"))
    dist = tmp_path / "dist"
    result = make("release", "REGISTRY=x", f"DIST={dist}", path=str(bin_dir))
    assert result.returncode == 2
    assert own_lines(result.stderr) == [
        "make release: docker is not installed; make release-files REGISTRY=x builds the "
        "wheel and YAML without it"
    ]
    assert not dist.exists()


def test_release_dry_run_builds_the_files_then_pushes_their_image(tmp_path):
    # `make -n` runs the $(MAKE) lines, as dry runs: the sub-makes print their recipes.
    result = make("-n", "release", f"REGISTRY={REGISTRY}", f"DIST={tmp_path}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    docker_check = next(i for i, line in enumerate(lines) if line.startswith("command -v docker"))
    makes = [i for i, line in enumerate(lines) if line.startswith(f"{shutil.which('make')} ")]
    assert [shlex.split(lines[i])[1:] for i in makes] == [
        ["--no-print-directory", "release-files", f"REGISTRY={REGISTRY}"],
        ["--no-print-directory", "image", f"IMAGE={RELEASE_IMAGE}"],
    ]
    assert docker_check < makes[0] and "make release:" in lines[docker_check]
    compiles = [shlex.split(line) for line in lines if " -m spottrain.pipelines compile " in line]
    assert len(compiles) == 1
    args = cli.parser().parse_args(compiles[0][3:])
    assert (args.image, args.out_dir) == (RELEASE_IMAGE, f"{tmp_path}/{__version__}/yaml")
    assert any(
        f' -m pip wheel -q --no-deps --no-build-isolation -w "{tmp_path}/{__version__}" .' in line
        for line in lines
    )
    assert lines[-2:] == [
        f'docker build -t "{RELEASE_IMAGE}" .',
        f'docker push "{RELEASE_IMAGE}"',
    ]
    assert list(tmp_path.iterdir()) == []  # a dry run
