"""Pipeline bodies with exit tasks that KFP OSS mishandles (``guards.check_exit_tasks``).

Shared by tests/unit/pipelines/test_pipelines.py (the guard) and
tests/unit/pipelines/test_kfp_compiler.py (what KFP's
own compiler and Argo's validation do with them). No ``from __future__ import
annotations``: the kfp SDK reads the parameter annotations as types.
"""

from spottrain.components.training_status.component import training_status


def two_exits(checkpoint_dir: str):
    """Two ignore_upstream_failure() tasks after one task: KFP keeps one exit hook."""
    work = training_status(checkpoint_dir=checkpoint_dir, train_steps=10)
    training_status(checkpoint_dir=checkpoint_dir, train_steps=1).after(
        work
    ).ignore_upstream_failure()
    training_status(checkpoint_dir=checkpoint_dir, train_steps=2).after(
        work
    ).ignore_upstream_failure()


def task_after_exit(checkpoint_dir: str):
    """A task after an exit task: Argo's DAG has no such task to depend on."""
    work = training_status(checkpoint_dir=checkpoint_dir, train_steps=10)
    done = training_status(checkpoint_dir=checkpoint_dir, train_steps=1).after(work)
    done.ignore_upstream_failure()
    training_status(checkpoint_dir=checkpoint_dir, train_steps=2).after(done)
