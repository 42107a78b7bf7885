"""spottrain: fault-tolerant TensorFlow training on spot GPUs with Kubeflow Pipelines."""

from spottrain.version import IMAGE, __version__

__all__ = ["IMAGE", "__version__"]
