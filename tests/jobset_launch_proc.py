"""The JobSet launcher as a process of its own against kube-cp, so that tests can
SIGKILL and SIGTERM it for real (a thread cannot be killed, and only a main thread
gets signals). Its one argument is JSON: kubeconfig, namespace, name, workers,
placement (Placement's fields), capacity_deadline. A stand-in for the component's
entry point, which is not wired to this engine yet (issue 30); prints each line and
exits with the launcher's code.
"""

from __future__ import annotations

import json
import sys

from kubernetes import config

from spottrain.placement import Placement
from spottrain.runtime.train_job import jobset as js
from spottrain.runtime.train_job import kube, launcher
from spottrain.runtime.train_job.kube import KubeError


def main() -> int:
    spec = json.loads(sys.argv[1])
    client = config.new_client_from_config(config_file=spec["kubeconfig"])
    ws = js.WorkerSet(
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
        kube.from_client(client, spec["namespace"]),
        ws,
        poll_seconds=0.5,
        capacity_deadline=spec.get("capacity_deadline", 3600),
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


if __name__ == "__main__":
    sys.exit(main())
