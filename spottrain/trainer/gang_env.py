"""Environment contract between the JobSet launcher and the trainer in its pods.

The launcher creates a JobSet, whose replicated Job is an Indexed Job (one pod per
worker) and whose controller makes the headless Service (``network.subdomain``), and
sets these variables in every pod; Kubernetes itself sets
``JOB_COMPLETION_INDEX``. ``spottrain.trainer.distribution`` derives ``TF_CONFIG`` from
them (peers are ``<job>-<index>.<service>:<port>``, worker 0 is the chief).
"""

JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
JOB_NAME = "SPOTTRAIN_JOB_NAME"
SERVICE = "SPOTTRAIN_JOB_SERVICE"
WORKERS = "SPOTTRAIN_JOB_WORKERS"
PORT = "SPOTTRAIN_JOB_PORT"
DEFAULT_PORT = 2222
