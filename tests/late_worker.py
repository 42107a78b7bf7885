"""``python -m tests.late_worker``: ``spottrain.trainer.task``, but the non-chief workers
start ``LATE_WORKER_S`` late (a peer's pod still waiting for its node or its image),
so the chief waits in the gang's start-up meanwhile."""

import json
import os
import runpy
import time

if json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {}).get("type") == "worker":
    time.sleep(float(os.environ.get("LATE_WORKER_S", "0")))
runpy.run_module("spottrain.trainer.task", run_name="__main__", alter_sys=True)
