"""The chief's log in the launcher's task log (spottrain/runtime/train_job/logs.py).

kube-cp has no kubelet to serve a pod's log, so the real ``kubernetes`` client of
:class:`Kube` reads it here from a small HTTP stand-in for the one call it makes
(``GET /api/v1/namespaces/{ns}/pods/{pod}/log?container=…&follow=true``, the body the
log as it is written, sent in chunks that split lines as the kubelet's stream may).
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from spottrain.runtime.train_job import kube
from spottrain.runtime.train_job.logs import ChiefLog

LOGS = {"st-x-workers-0-0-a": [b"step 1 loss 2.3\nstep 2 lo", b"ss 2.1\n", b"saved step 2"]}


class LogApi(BaseHTTPRequestHandler):
    requests: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        LogApi.requests.append(self.path)
        path, _, query = self.path.partition("?")
        pod, query = path.split("/")[-2], query.lower()  # the client sends follow=True
        if pod not in LOGS or "container=trainer" not in query or "follow=true" not in query:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in LOGS[pod]:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args):
        pass


@pytest.fixture
def api():
    from kubernetes import client

    LogApi.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), LogApi)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    conf = client.Configuration()
    conf.host = f"http://127.0.0.1:{server.server_address[1]}"
    yield kube.from_client(client.ApiClient(conf), "kubeflow")
    server.shutdown()


def pod(name: str, index: int, phase: str = "Running", uid: str = "") -> dict:
    annotations = {"batch.kubernetes.io/job-completion-index": str(index)}
    return {"metadata": {"name": name, "uid": uid or name, "annotations": annotations},
            "status": {"phase": phase}}  # fmt: skip


def test_the_chiefs_lines_reach_the_task_log_whole_and_once(api):
    lines: list[str] = []
    chief = ChiefLog(api, lines.append)
    pods = [pod("st-x-workers-0-0-a", 0), pod("st-x-workers-0-1-b", 1), pod("p", 0, "Pending")]
    chief.update(pods)
    chief.update(pods)  # the next look: already followed
    chief.join()
    assert lines == [
        "[st-x-workers-0-0-a] step 1 loss 2.3",
        "[st-x-workers-0-0-a] step 2 loss 2.1",
        "[st-x-workers-0-0-a] saved step 2",
    ]
    assert len(LogApi.requests) == 1  # the worker and the pending chief are not followed


def test_a_lost_stream_is_a_warning_and_a_new_chief_is_followed(api, caplog):
    lines: list[str] = []
    chief = ChiefLog(api, lines.append)
    with caplog.at_level(logging.WARNING):
        chief.update([pod("gone-0", 0, "Failed")])  # the API answers 404
        chief.join()
    assert lines == [] and "stopped following the log of gone-0" in caplog.text
    chief.update([pod("st-x-workers-0-0-a", 0, uid="restart-1")])  # the gang's next chief
    chief.join()
    assert lines[-1] == "[st-x-workers-0-0-a] saved step 2"
