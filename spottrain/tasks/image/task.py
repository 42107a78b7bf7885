"""The built-in task: an image classifier (ResNet50, MobileNetV2 or a small CNN + a new head).

It is what production trains by default (ResNet50 with ImageNet weights on tfds
``cassava``) and goes through the same public :class:`spottrain.Task` API as a
user's task: its settings are task args
(:class:`spottrain.tasks.image.settings.ImageSettings`, also given as flags:
``--image-dir``, ``--dataset``, ``--backbone``, ...; :mod:`spottrain.tasks.image.flags`),
:mod:`spottrain.tasks.image.data` its input and :mod:`spottrain.tasks.image.model` its model.
"""

from __future__ import annotations

from typing import Any

from spottrain import ConfigError, Task, TrainInput
from spottrain.tasks.image import data
from spottrain.tasks.image.settings import ImageSettings


class ImageClassificationTask(Task):
    """Softmax classification of images from a folder or a tfds dataset."""

    @classmethod
    def flags(cls):
        """``--image-dir``, ``--backbone``... on the trainer's command line (the default task)."""
        from spottrain.tasks.image import flags

        return flags

    def __init__(self, args: dict[str, Any], cfg):
        super().__init__(args, cfg)
        self.settings = ImageSettings.from_args(args, cfg.data)
        self.index: data.DataIndex | None = None
        self._pipelines: data.Pipelines | None = None

    def prepare(self) -> None:
        """Indexes the image folder or tfds dataset (names a missing or empty one)."""
        self.index = data.index_data(self.settings, self.cfg.seed)

    def num_train_examples(self) -> int:
        """Images in the training split."""
        return self.index.num_train

    @property
    def pipelines(self) -> data.Pipelines:
        """Built once, after the strategy (a split that fits the cache is decoded first)."""
        if self._pipelines is None:
            self._pipelines = data.Pipelines(self.index, self.settings, self.cfg.seed)
        return self._pipelines

    def build_model(self):
        """The classifier of :func:`.model.build_model` for the indexed classes."""
        from spottrain.tasks.image import model as model_lib  # Keras: imported only to train

        return model_lib.build_model(self.settings, len(self.index.class_names))

    def train_dataset(self, spec: TrainInput):
        """This worker's share of every global batch, a pure function of (seed, step)."""
        self._total_steps = spec.total_steps
        return self.pipelines.train_dataset(
            spec.global_batch,
            spec.start_step,
            spec.total_steps,
            worker=spec.worker_slice,
            per_replica=spec.per_replica_batch,
        )

    def loss(self, labels, outputs):
        """Softmax cross-entropy of integer labels and logits, per example."""
        import tensorflow as tf

        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels, outputs)

    # Batches are prefetched: the broken file may belong to a few steps ahead.
    _DECODE_LOOKAHEAD_STEPS = 16

    def explain(self, error: Exception, step: int, global_batch: int) -> ConfigError | None:
        """Names the image that broke this step's (or a prefetched step's) batch."""
        import tensorflow as tf

        pipes = self.pipelines
        if not isinstance(error, tf.errors.InvalidArgumentError):
            return None
        if not pipes.from_files or pipes.train_cache is not None:
            return None
        last = min(step + self._DECODE_LOOKAHEAD_STEPS, getattr(self, "_total_steps", step))
        items = pipes.items_for_steps(global_batch, step - 1, max(step, last) - 1)
        return data.undecodable_error(
            items, self.settings.image_size, f"in --image-dir (needed by step {step})"
        )

    def evaluate(self, model, batch_size: int) -> dict[str, Any]:
        """Validation loss, accuracy and confusion matrix, by each worker on the whole split.

        The matrix (rows: true labels, columns: predictions, in ``class_names`` order)
        is what the train components log as ``ClassificationMetrics``.
        """
        import numpy as np
        import tensorflow as tf

        ds = self.pipelines.val_dataset(batch_size)
        if ds is None:
            return {}

        @tf.function
        def eval_batch(images, labels):
            logits = model(images, training=False)
            losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
            predicted = tf.argmax(logits, -1, output_type=tf.int32)
            correct = tf.cast(tf.equal(predicted, labels), tf.float32)
            confusion = tf.math.confusion_matrix(labels, predicted, num_classes=classes)
            return tf.reduce_sum(losses), tf.reduce_sum(correct), confusion

        classes = len(self.index.class_names)
        total_loss = total_correct = count = 0.0
        matrix = np.zeros((classes, classes), dtype=np.int64)
        try:
            for images, labels in ds:
                batch_loss, correct, confusion = eval_batch(images, labels)
                total_loss += float(batch_loss)
                total_correct += float(correct)
                count += int(labels.shape[0])
                matrix += confusion.numpy()
        except tf.errors.InvalidArgumentError:
            if self.pipelines.from_files:
                error = data.undecodable_error(
                    self.pipelines.val.items, self.settings.image_size, "in the validation split"
                )
                if error:
                    raise error from None
            raise
        return {
            "val_loss": total_loss / count,
            "val_accuracy": total_correct / count,
            "val_examples": int(count),
            "confusion_matrix": matrix.tolist(),
        }

    def summary(self) -> dict[str, Any]:
        """The class names, in label order."""
        return {"class_names": self.index.class_names}

    def compatibility(self) -> dict[str, Any]:
        """The model's shape: backbone, image size, fine-tuning and the classes.

        The data's location may change between attempts (a pipeline's copy).
        """
        return {**self.settings.compatibility(), "class_names": list(self.index.class_names)}

    def __str__(self) -> str:
        s = self.settings
        return f"{s.backbone}, {s.image_size} px"
