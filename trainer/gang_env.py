"""Names of the environment a Job-engine gang pod gets (one place for both sides).

The launcher (spottrain.runtime.gke_job) sets them in the pod manifest; the trainer
(trainer/distribution.py) derives TF_CONFIG from them: workers
``<JOB_NAME>-<i>.<SERVICE>:<PORT>`` for i in range(WORKERS), chief = index 0.
Kubernetes itself sets JOB_COMPLETION_INDEX in the pods of an Indexed Job.
"""

JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
JOB_NAME = "SPOTTRAIN_JOB_NAME"
SERVICE = "SPOTTRAIN_JOB_SERVICE"
WORKERS = "SPOTTRAIN_JOB_WORKERS"
PORT = "SPOTTRAIN_JOB_PORT"
DEFAULT_PORT = 2222
