"""The JobSet launcher as a process of its own against kube-cp, so that tests can
SIGKILL and SIGTERM it for real (a thread cannot be killed, and only a main thread
gets signals). Its one argument is JSON: kubeconfig, namespace, name, workers,
placement (Placement's fields), capacity_deadline. A stand-in for the component's
entry point, which is not wired to this engine yet (issue 30); prints each line and
exits with the launcher's code. :class:`Proc` runs it from a test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from real_jobset import A100
from real_kube import wait_for

from spottrain.placement import Placement
from spottrain.runtime.train_job import component, kube, launcher
from spottrain.runtime.train_job import decide as d
from spottrain.runtime.train_job import jobset as js
from spottrain.runtime.train_job.kube import KubeError


def main() -> int:
    from kubernetes import client as k8s
    from kubernetes import config

    spec = json.loads(sys.argv[1])
    conf = k8s.Configuration()
    config.load_kube_config(config_file=spec["kubeconfig"], client_configuration=conf)
    if spec.get("proxy_port"):  # through tests/wire_faults.py's WireProxy
        conf.host = f"https://127.0.0.1:{spec['proxy_port']}"
    client = kube.api_client(conf)  # as in_cluster() makes it
    if "orphan_slack" in spec:  # a test's minutes made seconds
        launcher.ORPHAN_SLACK_S = spec["orphan_slack"]
    k = kube.from_client(client, spec["namespace"])
    # The launcher's own pod (a test's stand-in object on a node no kubelet serves), read
    # at start as the component reads its own: the gang's owner, the SIGTERM's question.
    pod = k.read_pod(spec["own_pod"]) if spec.get("own_pod") else None
    ws = js.WorkerSet(
        owner=component.run_owner(pod),
        name=spec["name"],
        namespace=spec["namespace"],
        image="trainer:test",
        args=("--checkpoint_dir=gs://bucket/ckpt",),
        workers=spec["workers"],
        placement=Placement(**spec["placement"]),
        run="run-1",
        attempt=spec.get("attempt", 1),
    )
    run = launcher.JobSetLauncher(
        k,
        ws,
        own_pod_disrupted=component.retry_follows(k, pod),
        poll_seconds=0.5,
        settings=d.Settings(
            capacity_deadline=spec.get("capacity_deadline", 3600), deadline=spec.get("deadline")
        ),
        say=lambda line: print(line, flush=True),
        chief_log=lambda line: print(line, flush=True),
    )
    launcher.install_sigterm(run)
    try:
        out = run.run()
    except KubeError as err:
        print(err, flush=True)
        return err.code
    print(f"OUTCOME {out.code} restarts={out.restarts} counted={out.restarts_counted}", flush=True)
    return out.code


class Proc:
    """tests/jobset_launch_proc.py as a process; its lines with their arrival times."""

    def __init__(self, cp, ns, name, workers=2, capacity_deadline=3600, launch=None,
                 **placement):  # fmt: skip
        spec = {
            "kubeconfig": cp.kubeconfig, "namespace": ns, "name": name, "workers": workers,
            "placement": {**A100, **placement}, "capacity_deadline": capacity_deadline,
            **(launch or {}),  # proxy_port, deadline, orphan_slack, own_pod
        }  # fmt: skip
        here = Path(__file__).resolve().parent
        env = {**os.environ, "PYTHONPATH": f"{here.parent}{os.pathsep}{here}"}
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, json.dumps(spec)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )  # fmt: skip
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def line(self, words: str, timeout: float = 120.0) -> tuple[float, str]:
        def seen():
            return next(((t, s) for t, s in self.lines if words in s), None)

        try:
            return wait_for(f"a launcher line with {words!r}", seen, timeout=timeout)
        except AssertionError:
            self.proc.kill()
            raise AssertionError(f"no line with {words!r}:\n{self.text()}") from None

    def text(self) -> str:
        return "\n".join(s for _, s in self.lines)

    def wait(self, timeout: float = 120.0) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(
                f"the launcher did not end in {timeout:.0f} s:\n{self.text()}"
            ) from None
        self._reader.join(5)
        return code


if __name__ == "__main__":
    sys.exit(main())
