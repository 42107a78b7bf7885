# The image every component and Vertex worker runs. The TensorFlow GPU base
# image's version must match setup.py's TF_RANGE (tests/test_foundation.py
# checks it): the right TF build for the hardware, with CUDA/cuDNN that fit.
FROM tensorflow/tensorflow:2.21.0-gpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/spottrain

COPY . .
# The local package with its `vertex` extra (the profile's Vertex TensorBoard upload);
# its versions are pinned in setup.py, which hadolint does not read.
# hadolint ignore=DL3013
RUN pip install ".[vertex]" \
    && python -c "import tensorflow as tf, trainer.task, trainer.forward, spottrain.components; assert tf.test.is_built_with_cuda()"

# py-spy (installed with the package) needs CAP_SYS_PTRACE to dump a hung
# worker: add it to the pod's securityContext on GKE.
ENTRYPOINT ["python", "-m", "trainer.task"]
