"""This process's TensorFlow settings, made before any of the task's code runs.

A task module may create TensorFlow objects when it is imported, as keras-io examples
write their vocabularies (a module-level ``StringLookup(vocabulary=...)``, a
``TextVectorization`` adapted at import, a ``tf.constant``). The first such object
starts TensorFlow's eager context, and from then on the process-wide settings are
refused (TF 2.21 ``tensorflow/python/eager/context.py``):

- ``Context.set_intra_op_parallelism_threads`` / ``..._inter_op_...`` (``--threads``):
  "Intra op parallelism cannot be modified after initialization";
- ``Context.configure_collective_ops``, which MultiWorkerMirroredStrategy's constructor
  calls (``collective_all_reduce_strategy.py``,
  ``CollectiveAllReduceExtended._initialize_multi_worker``): "Collective ops must be
  configured at program startup". Its ``enable_collective_ops`` on a started context
  only warns, "may cause error when accessing previously created tensors" (TF's
  b/129298253): objects made before it live on ``/job:localhost``, not this worker.

So the trainer (:func:`spottrain.trainer.attempt.start_trainer`) seeds, imports the
task's module only as far as its first TensorFlow object
(:func:`spottrain.trainer.task_loader.preload`), applies :func:`configure`, creates
its strategy (the gang forms), and then imports such a module whole and builds the
task. ``--check`` applies :func:`configure` and :func:`seed` before the import too, so
that it runs the task's module as a run does.
"""

from __future__ import annotations


def configure(cfg) -> None:
    """``--threads`` and ``--deterministic``: settings TensorFlow takes only before it starts."""
    import tensorflow as tf

    if cfg.threads:
        tf.config.threading.set_intra_op_parallelism_threads(cfg.threads)
        tf.config.threading.set_inter_op_parallelism_threads(cfg.threads)
    if cfg.deterministic:
        # GPU kernels (cuDNN, atomics in reductions) may otherwise sum in any order;
        # an op without a deterministic kernel then fails instead of drifting.
        tf.config.experimental.enable_op_determinism()


def seed(cfg) -> None:
    """Seeds Python's, NumPy's and TensorFlow's global generators with ``--seed``.

    Before the task's module is imported: a module-level ``np.random.shuffle`` (or an
    unseeded draw in ``examples()``) is then the same in every worker and every attempt,
    so a resume reads the same order (``keras.utils.set_random_seed``,
    ``keras/src/utils/rng_utils.py``, seeds ``random``, ``np.random`` and
    ``tf.random.set_seed``).
    """
    import keras

    keras.utils.set_random_seed(cfg.seed)
