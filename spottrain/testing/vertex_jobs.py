"""A stand-in for Vertex AI's JobService (custom jobs), served over real gRPC.

Used by the tests and by ``make run-deadline`` (:mod:`spottrain.testing.demo_deadline`).

The client side is the real ``aiplatform_v1.JobServiceClient``; this server takes
and returns the real ``aiplatform_v1`` messages on the service's real method paths
(``google.cloud.aiplatform.v1.JobService/CreateCustomJob`` etc., from the client's
``transports/grpc.py``). What a job does is scripted, one behaviour per created job:

- ``"run"``: runs worker pool 0's ``command + args`` as a local process with the
  pool's env; exit 0 → ``JOB_STATE_SUCCEEDED``, else ``JOB_STATE_FAILED``. That is
  the job after Vertex's own restarts are used up ("Understand the Vertex AI serverless
  training service": 5 per worker, then 3 job retries), which are not modelled.
- ``"preempt@N"``: the same under ``spottrain.trainer.launch --preempt-at-step N``,
  which sends the trainer its notice at step N of a fresh start (it saves and exits
  143) → ``JOB_STATE_FAILED``. The pool's command must be the trainer's.
- ``"preempt~S"``: ``"run"``, and S seconds after its trainer logged its first step
  its process gets SIGTERM, as Vertex stops a preempted spot job's workers (at any
  step, every time; needs ``log_dir``).
- ``"wait"``: ``JOB_STATE_PENDING`` until cancelled, nothing run (capacity never comes).
- ``"stockout"``: ``JOB_STATE_FAILED`` at once, nothing run (no capacity).
- ``"refuse"``: ``CreateCustomJob`` answers ``INVALID_ARGUMENT``.
- ``"quota"``: ``CreateCustomJob`` answers ``RESOURCE_EXHAUSTED``.

The error of a failed job is code 3 with a worker's exit in the message, our reading
of what the Vertex console shows; the launcher under test does not decide on it.
``by_strategy`` gives a behaviour by the job's scheduling strategy (``{"SPOT":
"preempt~6"}``) once the script is used up.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent import futures

import grpc
from google.cloud import aiplatform_v1
from google.protobuf import empty_pb2

SERVICE = "google.cloud.aiplatform.v1.JobService"
S = aiplatform_v1.JobState


class JobService:
    """The scripted service; ``jobs`` lists the created jobs in order."""

    def __init__(
        self,
        script: list[str],
        env: dict[str, str] | None = None,
        log_dir=None,
        by_strategy: dict[str, str] | None = None,
    ):
        self.script = list(script)
        self.by_strategy = dict(by_strategy or {})
        self.env = dict(env or os.environ)
        self.log_dir = log_dir
        self.jobs: list[aiplatform_v1.CustomJob] = []
        self.cancelled: list[str] = []
        self._procs: dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handlers = {
            "CreateCustomJob": self._unary(self.create, aiplatform_v1.CreateCustomJobRequest),
            "GetCustomJob": self._unary(self.get, aiplatform_v1.GetCustomJobRequest),
            "CancelCustomJob": grpc.unary_unary_rpc_method_handler(
                self.cancel,
                request_deserializer=aiplatform_v1.CancelCustomJobRequest.deserialize,
                response_serializer=empty_pb2.Empty.SerializeToString,
            ),
        }
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, handlers),)
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    @staticmethod
    def _unary(fn, request_type):
        return grpc.unary_unary_rpc_method_handler(
            fn,
            request_deserializer=request_type.deserialize,
            response_serializer=aiplatform_v1.CustomJob.serialize,
        )

    def __enter__(self) -> JobService:
        self.server.start()
        return self

    def __exit__(self, *exc) -> None:
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.server.stop(0)

    @property
    def address(self) -> str:
        """host:port the service listens on (no TLS)."""
        return f"127.0.0.1:{self.port}"

    def create(self, request, context):
        """``CreateCustomJob``: the next behaviour of the script (or by strategy)."""
        strategy = request.custom_job.job_spec.scheduling.strategy.name
        behaviour = self.script.pop(0) if self.script else self.by_strategy.get(strategy, "run")
        if behaviour == "refuse":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "worker_pool_specs[0]: bad spec")
        if behaviour == "quota":
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "Quota exceeded for custom jobs")
        with self._lock:
            job = aiplatform_v1.CustomJob(request.custom_job)
            job.name = f"{request.parent}/customJobs/{len(self.jobs) + 1}"
            self.jobs.append(job)
        if behaviour == "stockout":
            job.state = S.JOB_STATE_FAILED
            job.error = {"code": 8, "message": "The zone does not have enough resources (stockout)"}
            return job
        if behaviour == "wait":
            job.state = S.JOB_STATE_PENDING
            return job
        job.state = S.JOB_STATE_RUNNING
        pool = job.job_spec.worker_pool_specs[0].container_spec
        env = {**self.env, **{e.name: e.value for e in pool.env}}
        argv = [*pool.command, *pool.args]
        if behaviour.startswith("preempt@"):
            assert list(pool.command)[-2:] == ["-m", "spottrain.trainer.task"], pool.command
            step = behaviour.split("@")[1]
            # --verbose: the job's log holds every line, as a Vertex job's does.
            argv = [sys.executable, "-m", "spottrain.trainer.launch", "--verbose", "--workers", "1",
                    "--preempt-at-step", step, "--signal", "TERM", "--", *pool.args]  # fmt: skip
        out = open(f"{self.log_dir}/job-{len(self.jobs)}.log", "w") if self.log_dir else None
        proc = self._procs[job.name] = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT
        )
        if behaviour.startswith("preempt~"):
            seconds = float(behaviour.split("~")[1])
            log = f"{self.log_dir}/job-{len(self.jobs)}.log"
            threading.Thread(target=_preempt, args=(proc, log, seconds), daemon=True).start()
        return job

    def get(self, request, context):
        """``GetCustomJob``: a running job's state follows its process."""
        job = self._job(request.name, context)
        proc = self._procs.get(job.name)
        if proc is not None and job.state == S.JOB_STATE_RUNNING and proc.poll() is not None:
            if job.name in self.cancelled:
                job.state = S.JOB_STATE_CANCELLED
            elif proc.returncode == 0:
                job.state = S.JOB_STATE_SUCCEEDED
            else:
                job.state = S.JOB_STATE_FAILED
                job.error = {
                    "code": 3,
                    "message": "The replica workerpool0-0 exited with a non-zero status of "
                    f"{proc.returncode}.",
                }
        return job

    def cancel(self, request, context):
        """``CancelCustomJob``: SIGTERM to its process; a pending job is cancelled at once."""
        job = self._job(request.name, context)
        self.cancelled.append(job.name)
        if job.state == S.JOB_STATE_PENDING:
            job.state = S.JOB_STATE_CANCELLED
        proc = self._procs.get(job.name)
        if proc is not None and proc.poll() is None:
            proc.terminate()  # Vertex stops the workers: the trainer gets its notice
        return empty_pb2.Empty()

    def _job(self, name, context) -> aiplatform_v1.CustomJob:
        for job in self.jobs:
            if job.name == name:
                return job
        context.abort(grpc.StatusCode.NOT_FOUND, f"{name} not found")


def _preempt(proc: subprocess.Popen, log: str, seconds: float) -> None:
    """SIGTERMs ``proc`` ``seconds`` after its log shows a training step (or it ends)."""
    import re
    import time

    while proc.poll() is None:
        with open(log, errors="replace") as f:
            if re.search(r"\bstep \d+/", f.read()):
                break
        time.sleep(0.2)
    time.sleep(seconds)
    proc.terminate()
