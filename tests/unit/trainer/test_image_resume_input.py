"""The built-in image task's input: a resume reads nothing before its position (issue 55).

An image folder's epoch is a stateless permutation of its files; a resume at step s
starts that epoch's permutation at s's position instead of skipping the ones before it.
Both ways (in memory and decoded per step) against the uninterrupted pipeline.
"""

from __future__ import annotations

import numpy as np
import pytest

from spottrain.tasks.image import data
from spottrain.tasks.image.settings import ImageSettings

GLOBAL = 16


def _pipelines(digits_dir, cache_mb):
    cfg = ImageSettings(image_dir=digits_dir, image_size=16, cache_max_mb=cache_mb)
    return data.Pipelines(data.index_image_dir(cfg, 3), cfg, 3)


@pytest.mark.parametrize("cache_mb", [64, 0], ids=["in memory", "decoded per step"])
def test_an_image_folder_resumes_each_worker_at_its_position(digits_dir, cache_mb):
    p = _pipelines(digits_dir, cache_mb)
    per_epoch = p.num_train // GLOBAL  # ~101 steps: the run below crosses two epochs

    def labels(start, total, worker=None):
        ds = p.train_dataset(GLOBAL, start, total, worker)
        return [np.asarray(y).tolist() for _, y in ds]

    def images(start, total):
        return [np.asarray(x) for x, _ in p.train_dataset(GLOBAL, start, total)]

    end = 2 * per_epoch + 6
    whole = labels(0, end)
    assert len(whole) == end
    for start in (1, per_epoch - 1, per_epoch + 3, 2 * per_epoch + 1):
        assert labels(start, end) == whole[start:], start
    at = 2 * per_epoch + 1
    tail, whole_images = images(at, end), images(0, end)[at:]
    assert all(np.array_equal(a, b) for a, b in zip(tail, whole_images, strict=True))
    halves = [labels(per_epoch + 3, end, slice(h * 8, h * 8 + 8)) for h in (0, 1)]
    assert [a + b for a, b in zip(*halves, strict=True)] == whole[per_epoch + 3 :]
