"""A stand-in of the KFP v2beta1 REST API (what kfp.Client sends); the pipelines CLI in-process."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

from spottrain.pipelines import __main__ as cli


class KfpApi(BaseHTTPRequestHandler):
    """Just enough of the KFP v2beta1 REST API to record what kfp.Client sends."""

    existing: dict[str, str] = {}
    requests: list[tuple[str, str, bytes]] = []

    def _reply(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self.requests.append(("GET", self.path, b""))
        if self.path.startswith("/apis/v2beta1/pipelines?"):
            found = [
                {"pipeline_id": pid, "display_name": name}
                for name, pid in self.existing.items()
                if name in self.path.replace("%22", '"')
            ]
            self._reply({"pipelines": found} if found else {})
        elif self.path.startswith("/apis/v2beta1/experiments?"):
            self._reply({"experiments": [{"experiment_id": "e1", "display_name": "spottrain"}]})
        else:
            self._reply({})

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.requests.append(("POST", self.path, body))
        if self.path.startswith("/apis/v2beta1/pipelines/upload_version"):
            self._reply({"pipeline_id": "p1", "pipeline_version_id": "v2"})
        elif self.path.startswith("/apis/v2beta1/pipelines/upload"):
            self._reply({"pipeline_id": "p-new", "display_name": "x"})
        elif self.path.startswith("/apis/v2beta1/runs"):
            self._reply({"run_id": "r1", "display_name": "run", "experiment_id": "e1"})
        else:
            self._reply({})

    def log_message(self, *args):
        pass


def run_cli(*argv, capsys):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err
