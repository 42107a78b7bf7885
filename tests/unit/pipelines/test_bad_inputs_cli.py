"""Every bad input of the CLI: one stderr line naming the value, the right exit code, fast.

The in-process tests; those that start processes are in
tests/integration/pipelines/test_bad_inputs_cli.py.
"""

import pytest

from spottrain import datasets
from spottrain.pipelines import __main__ as cli
from spottrain.pipelines import submit


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["digits", "out", "--limit", "-5"], "--limit -5 must be >= 0"),
        (["digits", "/etc/hostname/x"], "'/etc/hostname' is a file, not a folder"),
        (["digits", "/etc/hostname"], "'/etc/hostname' is a file, not a folder"),
        (["mnist", "out"], "invalid choice: 'mnist'"),
        (["digits", "out", "--limit", "x"], "invalid int value: 'x'"),
        # A file system that refuses new files even to root (procfs): found on write.
        (["digits", "/proc/spottrain-digits", "--limit", "3"], "cannot write '/proc/spottrain"),
    ],
)
def test_datasets_cli_refuses_bad_arguments(argv, needle, capsys):
    try:
        code = datasets.main(argv)
    except SystemExit as done:
        code = done.code
    err = capsys.readouterr().err
    assert (code, err.count("\n")) == (2, 1), err
    assert needle in err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--out", "/etc/hostname"], "--out '/etc/hostname': '/etc/hostname' is a file"),
        (["--workers", "0"], "--workers 0 must be >= 1"),
        (["--steps", "-3"], "--steps -3 must be >= 1"),
        (["--preempt-at-step", "-1"], "--preempt-at-step -1 must be >= 0"),
    ],
)
def test_demo_refuses_bad_arguments_before_writing(argv, needle, capsys):
    from spottrain import demo

    with pytest.raises(SystemExit) as done:
        demo.main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and needle in err.splitlines()[-1], err


def test_an_endpoint_whose_name_does_not_resolve_is_named(monkeypatch):
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(submit.ServiceError) as e:
        submit.check_reachable("https://kfp.example.invalid", "KFP at x")
    assert "KFP at x is unreachable: cannot resolve kfp.example.invalid" in str(e.value)
    assert e.value.exit_code == submit.UNAVAILABLE_EXIT


def test_the_vertex_regions_include_every_one_the_sdk_knows():
    """The list (spottrain/runtime/vertex_regions.py) is the SDK's, less ``global``: a
    newer SDK that knows a new region fails this test until the list has it."""
    from google.cloud.aiplatform.constants import base

    from spottrain.runtime import vertex_regions

    assert set(base.SUPPORTED_REGIONS) - {"global"} <= vertex_regions.REGIONS
    assert "global" not in vertex_regions.REGIONS  # runs no custom job


@pytest.mark.parametrize(
    "argv",
    [
        ["rbac", "--execute"],
        ["computeclass", "--execute"],
        ["retry-policy", "--execute"],
        ["jobset", "--execute"],
    ],
    ids=lambda a: a[0],
)
def test_execute_without_a_cluster_is_one_line_before_kubectl(argv, tmp_path, monkeypatch, capsys):
    """kubectl's own complaint was 23-77 lines and exit 1; the check comes first, as
    retry-policy's did, and prints no manifest either."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setenv("HOME", str(tmp_path))
    got = cli.main(argv)
    out, err = capsys.readouterr()
    assert (got, err.count("\n")) == (2, 1), err
    assert "--execute needs" in err and "kubeconfig" in err, err
    assert out == ""
