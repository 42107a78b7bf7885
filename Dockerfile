# The image every component and Vertex worker runs. The TensorFlow GPU base
# image's version must match setup.py's TF_RANGE (tests/integration/project/test_foundation.py
# checks it): the right TF build for the hardware, with CUDA/cuDNN that fit.
FROM tensorflow/tensorflow:2.21.0-gpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# tini, the init `docker run --init` uses, as every container's PID 1: it blocks all
# signals in its first instructions and passes them on, so a preemption notice in the
# ~20-100 ms before Python has a handler is not dropped by the kernel (bench/pid1_notice.py).
# The distribution's package: Ubuntu and Debian ship 0.19.0, the tests' copy (make tools).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/spottrain

COPY . .
# The local package with its `trainer` extra (TensorFlow, the engine's and profiler's
# dependencies), its `vertex` extra (the profile's Vertex TensorBoard upload, the
# Vertex fall-back launcher) and its `pricing` extra (the Cloud Billing Catalog client
# for the attempts' cost figures); its versions are pinned in setup.py, which hadolint does
# not read.
# hadolint ignore=DL3013
RUN pip install ".[trainer,vertex,pricing]" \
    && tini --version \
    && python -c "import tensorflow as tf; assert tf.test.is_built_with_cuda()" \
    && python -c "import spottrain.trainer.task, spottrain.tasks.image.task, spottrain.trainer.forward, spottrain.components, spottrain.runtime.fallback_decision, spottrain.runtime.gcs_copy, spottrain.runtime.profile, spottrain.runtime.train_job.component, spottrain.runtime.train, spottrain.runtime.train_settings, spottrain.runtime.training_status, spottrain.runtime.vertex_job, spottrain.pricing.catalog, google.cloud.billing_v1"

# py-spy (installed with the package) needs CAP_SYS_PTRACE to dump a hung
# worker: add it to the pod's securityContext on GKE.
ENTRYPOINT ["tini", "--", "python", "-m", "spottrain.trainer.task"]
