"""kube-cp and jobset-manager come up when another process takes a port they use (issue 42).

kube-cp used to pick its API server's port by binding port 0 and closing it, write
the port into its kubeconfig, and bind it again seconds later: a suite beside ours
took it ("bind: address already in use", then 120 s of waiting for /readyz). Here
another process takes that port the moment the kubeconfig names it.
"""

from __future__ import annotations

import errno
import socket
import subprocess
import sys

import pytest
from real_kube import KUBE_CP, NO_KUBE_CP, ControlPlane

from spottrain.testing.ports import listening_ports

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not KUBE_CP.exists(), reason=NO_KUBE_CP),
]

# Another process: waits for the kubeconfig, then binds and listens on its port.
THIEF = r"""
import pathlib, re, socket, sys, time
path = pathlib.Path(sys.argv[1])
while True:
    m = re.search(r"server: https://127\.0\.0\.1:(\d+)", path.read_text() if path.exists() else "")
    if m:
        break
    time.sleep(0.002)
port = int(m.group(1))
try:
    s = socket.create_server(("127.0.0.1", port))
    print("took", port, flush=True)
except OSError as err:
    print("refused", port, err.errno, flush=True)
sys.stdin.read()  # holds the port until the test closes stdin
"""


def test_kube_cp_holds_its_api_port_before_it_names_it(tmp_path):
    pytest.importorskip("kubernetes")
    thief = subprocess.Popen(
        [sys.executable, "-c", THIEF, str(tmp_path / "pki" / "admin.kubeconfig")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    cp = None
    try:
        cp = ControlPlane(tmp_path)  # before: "did not print READY", the port stolen
        what, port, *code = thief.stdout.readline().split()
        assert cp.server == f"https://127.0.0.1:{port}"
        assert (what, code) == ("refused", [str(errno.EADDRINUSE)]), "the port was free"
        assert cp.core().list_namespace().items  # the API answers on it
    finally:
        thief.stdin.close()
        thief.wait(10)
        if cp:
            cp.stop()


def test_jobset_manager_starts_again_on_fresh_ports_when_one_is_taken(tmp_path, monkeypatch):
    """Its ports go in a config file, picked and released first: the first webhook port
    it is given is taken (listening) by another server; it must still come up."""
    import controller_manager
    import real_jobset

    if not (real_jobset.JOBSET_MANAGER.exists() and real_jobset.JOBSET_CONFIG.is_dir()):
        pytest.skip(real_jobset.NO_JOBSET)
    pytest.importorskip("kubernetes")
    taken = socket.create_server(("127.0.0.1", 0))
    picks = [taken.getsockname()[1]]
    pick = controller_manager.free_port
    monkeypatch.setattr(controller_manager, "free_port", lambda: picks.pop(0) if picks else pick())
    cp = ControlPlane(tmp_path)
    manager = None
    try:
        real_jobset.install_crd(cp)
        manager = real_jobset.JobSetManager(cp, tmp_path)  # before: "exited 1 ... in use"
        assert manager.webhook_port != taken.getsockname()[1]
        assert {manager.webhook_port, manager.probe_port} <= listening_ports(manager.proc.pid)
    finally:
        taken.close()
        if manager:
            manager.stop()
        cp.stop()
