"""Shared pytest fixtures. Edit with targeted insertions: several areas add fixtures here."""

import os
import platform
import subprocess
from pathlib import Path

import pytest

# One intra/inter-op thread per TF process: tests start several worker processes on
# 2 cores, where oversubscription costs 25-45 % (measured).
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# -- Tiers: `make test-fast` runs the unit tier (SPOTTRAIN_TIER=unit) ---------------------------


class StartsAProcess(RuntimeError):
    """A test of the unit tier started a process: it belongs in tests/integration."""


TIERS = ("unit", "integration", "system")


def pytest_collection_modifyitems(config, items):
    """A test's tier is its folder: tests/unit, tests/integration or tests/system.

    ``unit``: in-process and quick (``make test-fast``); ``integration``: starts our
    processes or servers (trainers, fake-gcs-server, the CLI, the tools); ``system``:
    runs ours on the platform's own code (kfp.local, kube-cp, Argo, JobSet, the PID-1
    chain). A tier marker written on a test must agree with its folder.
    """
    root = Path(__file__).resolve().parent
    for item in items:
        parts = Path(item.path).resolve().relative_to(root).parts
        tier = parts[0] if len(parts) > 1 else ""
        if tier not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: a test lives in tests/{{{','.join(TIERS)}}}/")
        written = {m.name for m in item.iter_markers()} & set(TIERS)
        if written - {tier}:
            raise pytest.UsageError(f"{item.nodeid}: marked {sorted(written)} but in tests/{tier}/")
        item.add_marker(getattr(pytest.mark, tier))


_POPEN_INIT = subprocess.Popen.__init__
# The standard library runs `uname -p` once per process, the first time anything asks
# for the processor (TensorFlow's import does), and caches it: asked here, before any
# test, so a unit test run alone does not count that as its own process.
platform.processor()


def _refuse_processes(self, args, *a, **k):
    raise StartsAProcess(f"a unit test starts no process ({args!r}): it goes in tests/integration")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Under ``make test-fast`` a unit test that starts a process fails, naming why (its
    fixtures' processes too, module- and session-scoped ones included)."""
    if os.environ.get("SPOTTRAIN_TIER") == "unit" and item.get_closest_marker("unit"):
        subprocess.Popen.__init__ = _refuse_processes


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    subprocess.Popen.__init__ = _POPEN_INIT


@pytest.fixture(autouse=True)
def _logger_levels_restored():
    """Each test leaves every logger's level as it found it.

    A test that quieted ``spottrain.copier`` for good made a later test in the same
    process miss run-local's "upload: copied …" line (CI's one failure, order-dependent).
    """
    import logging

    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    before = {lg: lg.level for lg in loggers if isinstance(lg, logging.Logger)}
    yield
    for lg, level in before.items():
        # Only those changed: each setLevel clears every logger's cache (O(loggers)).
        if lg.level != level:
            lg.setLevel(level)


# -- GCS emulator (spottrain.testing.gcs_emulator) -------------------------------------------------


@pytest.fixture(scope="session")
def fake_gcs():
    """One fake-gcs-server (in-memory) for the session; STORAGE_EMULATOR_HOST points at it.

    Tests share it: make buckets with unique names (or use ``gcs_bucket``).
    """
    from spottrain.testing.gcs_emulator import FakeGcs

    with FakeGcs() as gcs:
        yield gcs


@pytest.fixture
def gcs_bucket(fake_gcs, request):
    """A fresh, empty bucket in the session's fake-gcs-server."""
    import re
    import uuid

    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    return fake_gcs.create_bucket(f"{stem}-{uuid.uuid4().hex[:8]}")


# -- Trainer (spottrain/trainer/) ------------------------------------------------------------------


@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory):
    """scikit-learn's bundled digits written as an image folder <root>/<label>/*.png."""
    from spottrain.datasets import write_digits

    root = tmp_path_factory.mktemp("digits")
    assert write_digits(str(root)) == 1797
    return str(root)


# -- Pipelines: compiled YAML as a user's `make compile IMAGE=...` would leave it -----------

PUSHED_IMAGE = "europe-west4-docker.pkg.dev/my-project/ml/trainer:1.0"


@pytest.fixture(scope="session")
def pushed_compiled_dir(tmp_path_factory):
    """Copies of the committed pipelines naming a pushed image instead of the placeholder.

    The CLI refuses to upload or run the committed YAML itself (its image is a
    placeholder); tests that go as far as a request use these.
    """
    from spottrain.pipelines import compile as comp
    from spottrain.version import IMAGE

    out = tmp_path_factory.mktemp("compiled-pushed")
    for path in comp.COMPILED_DIR.glob("*.yaml"):
        text = path.read_text()
        assert IMAGE in text, path
        (out / path.name).write_text(text.replace(IMAGE, PUSHED_IMAGE))
    return out


@pytest.fixture
def kfp_api(pushed_compiled_dir, monkeypatch):
    """A stand-in KFP API server (tests/kfp_api.py) on loopback: (its handler class, URL)."""
    import threading
    from http.server import ThreadingHTTPServer

    from kfp_api import KfpApi

    from spottrain.pipelines import compile as comp

    # The pipelines as compiled against a pushed image (the committed ones are refused).
    monkeypatch.setattr(comp, "COMPILED_DIR", pushed_compiled_dir)
    KfpApi.requests = []
    KfpApi.existing = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), KfpApi)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield KfpApi, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def metadata():
    """Makes stand-in GCE metadata servers on loopback (tests/standins/gce_metadata.py)."""
    from standins.gce_metadata import MetadataServer

    servers = []

    def make(**kw) -> MetadataServer:
        servers.append(MetadataServer(**kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


@pytest.fixture
def read_only_dir(tmp_path):
    """A read-only tmpfs (what a ``ro`` mount gives in a pod; root ignores mode bits)."""
    path = tmp_path / "read-only"
    path.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)]
    if subprocess.run(mount, check=False).returncode:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    yield path
    subprocess.run(["umount", "-l", str(path)], check=False)
