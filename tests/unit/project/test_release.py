"""``make release-files``, ``make release`` and ``compile --out-dir``, run for real.

The in-process tests; those that start processes are in
tests/integration/project/test_release.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spottrain.pipelines import __main__ as cli
from spottrain.pipelines import compile as comp

REPO = Path(__file__).resolve().parents[3]


def committed() -> dict[Path, tuple[bytes, int]]:
    """The committed YAML files' bytes and modification times."""
    files = [*comp.COMPONENTS_DIR.glob("*/component.yaml"), *comp.COMPILED_DIR.glob("*.yaml")]
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files}


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--out-dir", "{file}"], "--out-dir '{file}': '{file}' is a file, not a folder"),
        (["--out-dir", "{file}/yaml"], "--out-dir '{file}/yaml': '{file}' is a file, not"),
        (["--out-dir", ""], "--out-dir '': is empty"),
        (["--out-dir", str(REPO)], "holds the committed YAML (compile without --out-dir"),
        (["--out-dir", "{tmp}/y", "--check"], "--out-dir '{tmp}/y' writes every committed"),
        (["--out-dir", "{tmp}/y", "--target", "gke", "--out", "{tmp}/x.yaml"], "not with --target"),
        (["--out-dir", "{tmp}/y", "--pool", "spot"], "--pool 'spot' is only used with --target"),
    ],
)
def test_compile_out_dir_refusals_are_one_line(argv, needle, tmp_path, capsys):
    file = tmp_path / "file"
    file.write_text("")
    names = {"tmp": str(tmp_path), "file": str(file)}
    before = committed()
    code = cli.main(["compile", *(a.format(**names) for a in argv)])
    err = capsys.readouterr().err
    assert (code, err.count("\n")) == (2, 1), err
    assert needle.format(**names) in err
    assert committed() == before and sorted(p.name for p in tmp_path.iterdir()) == ["file"]
