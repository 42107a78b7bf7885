"""Input data: image folders (local or gs://) and tfds datasets.

Resumption needs no iterator state: the examples of global step ``s`` are a
pure function of ``(seed, s)``, and a run starting at step ``s`` begins its stream
at flat position ``s * global_batch``. An interrupted-and-resumed run therefore
sees exactly the batches an uninterrupted run sees. Each epoch is

* a stateless permutation of the training set, when it is indexed: an image
  folder's file list, or a split decoded into memory because it fits in
  ``--cache-max-mb``;
* otherwise (a tfds split larger than that) the split streamed from its files in
  their fixed order, each window of records permuted by ``(seed, epoch)``: nothing
  but a window of records is held in memory, and a resumed run reads (without decoding)
  through at most one epoch to reach its first example.

An indexed epoch starts a resume at its position in the permutation: nothing before it
is read. Each worker takes its part of a global batch's indices (or undecoded records)
before anything is decoded or gathered.
"""

from __future__ import annotations

import logging
import math
import re
import zlib
from dataclasses import dataclass

from spottrain import fileio
from spottrain.exits import ConfigError
from spottrain.tasks.image.settings import IMAGE_EXTENSIONS, ImageSettings

log = logging.getLogger(__name__)


@dataclass
class Split:
    """Examples of one image-folder split: file paths and int labels."""

    items: list[str]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class DataIndex:
    """What the trainer knows about its data before TensorFlow starts."""

    source: str  # "image_dir" or "tfds"
    class_names: list[str]
    train: Split | None = None
    val: Split | None = None
    tfds_builder: object | None = None
    tfds_splits: tuple[str, str] = ("", "")  # the train and validation split specs
    tfds_num_train: int = 0

    @property
    def num_train(self) -> int:
        """Examples in the training split."""
        return len(self.train) if self.train is not None else self.tfds_num_train


def _held_out(relative_path: str, fraction: float, seed: int) -> bool:
    """Stable per-file split: the same file lands in the same split on every worker and run."""
    h = zlib.crc32(f"{seed}:{relative_path}".encode()) / 2**32
    return h < fraction


def index_image_dir(cfg: ImageSettings, seed: int) -> DataIndex:
    """Lists ``<root>/<label>/*`` images; raises ConfigError naming what is wrong."""
    gfile = fileio.gfile()
    root = cfg.image_dir.rstrip("/")
    if not gfile.isdir(root):
        raise ConfigError(f"--image-dir {cfg.image_dir!r} does not exist or is not a directory")
    class_names = sorted(
        name.rstrip("/") for name in gfile.listdir(root) if gfile.isdir(f"{root}/{name}")
    )
    if len(class_names) < 2:
        raise ConfigError(
            f"--image-dir {cfg.image_dir!r} has {len(class_names)} class folder(s); "
            "expected <root>/<label>/*.png|jpg with at least 2 labels"
        )
    train, val = Split([], []), Split([], [])
    for label, name in enumerate(class_names):
        files = sorted(
            f for f in gfile.listdir(f"{root}/{name}") if f.lower().endswith(IMAGE_EXTENSIONS)
        )
        if not files:
            raise ConfigError(f"class folder {root}/{name!r} has no .png/.jpg images")
        for f in files:
            split = val if _held_out(f"{name}/{f}", cfg.val_fraction, seed) else train
            split.items.append(f"{root}/{name}/{f}")
            split.labels.append(label)
    if not train.labels:
        raise ConfigError(f"--val-fraction {cfg.val_fraction} leaves no training images")
    log.info(
        "image folder %s: %d classes, %d train / %d validation images",
        root,
        len(class_names),
        len(train),
        len(val),
    )
    return DataIndex("image_dir", class_names, train, val)


def index_tfds(cfg: ImageSettings) -> DataIndex:
    """Checks that the tfds dataset exists and is prepared, without downloading anything.

    ``tfds.load`` of an unprepared dataset retries downloads for minutes before
    failing; a training job should instead fail at once with the fix.
    """
    import tensorflow_datasets as tfds

    try:
        builder = tfds.builder(cfg.dataset, data_dir=cfg.data_dir or None)
    except Exception as e:  # DatasetNotFoundError and friends; message is long, keep one line
        raise ConfigError(
            f"--dataset {cfg.dataset!r} is not a known tfds dataset ({type(e).__name__})"
        ) from e
    if not builder.is_prepared():
        raise ConfigError(
            f"tfds dataset {cfg.dataset!r} is not prepared in --data-dir "
            f"{cfg.data_dir or '~/tensorflow_datasets'!r}; run `tfds build {cfg.dataset} "
            "--data_dir=...` once, or copy a prepared data_dir there"
        )
    image_key, label_key = builder.info.supervised_keys or ("image", "label")
    class_names = list(builder.info.features[label_key].names)
    splits = builder.info.splits
    for split in (cfg.train_split, cfg.val_split):
        if split and split.split("[")[0] not in splits:
            raise ConfigError(
                f"split {split!r} is not in tfds dataset {cfg.dataset!r} (has {', '.join(splits)})"
            )
    if cfg.val_split:
        train_spec, val_spec = cfg.train_split, cfg.val_split
    else:
        keep = round(100 * (1 - cfg.val_fraction))
        train_spec = f"{cfg.train_split}[:{keep}%]"
        val_spec = f"{cfg.train_split}[{keep}%:]" if keep < 100 else ""
    num_train = splits[train_spec].num_examples
    if not num_train:
        raise ConfigError(f"split {train_spec!r} of tfds dataset {cfg.dataset!r} is empty")
    log.info(
        "tfds %s: %d train / %d validation",
        cfg.dataset,
        num_train,
        splits[val_spec].num_examples if val_spec else 0,
    )
    return DataIndex(
        "tfds",
        class_names,
        tfds_builder=builder,
        tfds_splits=(train_spec, val_spec),
        tfds_num_train=num_train,
    )


def index_data(cfg: ImageSettings, seed: int) -> DataIndex:
    """Validates and indexes the configured data source (fast; no decoding).

    Args:
        cfg: The image task's settings.
        seed: The run's seed (it picks an image folder's held-out files).
    """
    return index_image_dir(cfg, seed) if cfg.image_dir else index_tfds(cfg)


def tfds_stream(index: DataIndex, split: str):
    """A tfds split as ``(encoded image, int32 label)`` in its files' fixed order."""
    import tensorflow as tf
    import tensorflow_datasets as tfds

    builder = index.tfds_builder
    image_key, label_key = builder.info.supervised_keys or ("image", "label")
    ds = builder.as_dataset(
        split=split, decoders={image_key: tfds.decode.SkipDecoding()}, shuffle_files=False
    )
    return ds.map(lambda ex: (ex[image_key], tf.cast(ex[label_key], tf.int32)))


def _decoder(image_size: int, from_files: bool):
    import tensorflow as tf

    def decode(item):
        encoded = tf.io.read_file(item) if from_files else item
        image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        image = tf.image.resize(image, [image_size, image_size], antialias=True)
        return tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)

    return decode


def find_undecodable(items, image_size: int) -> tuple[str, str] | None:
    """The first image file of ``items`` TensorFlow cannot decode, and why; None if none.

    Run only after a decode failed: tf.data's error names no file, and a file is
    what a user can fix.
    """
    import tensorflow as tf

    decode = _decoder(image_size, from_files=True)
    for path in items:
        try:
            decode(tf.constant(path))
        except tf.errors.OpError as e:
            reason = re.sub(r"\{\{[^}]*\}\}|\[Op:[^\]]*\].*", "", e.message).strip()
            return str(path), (reason.splitlines() or ["?"])[0][:200]
    return None


def undecodable_error(items, image_size: int, where: str) -> ConfigError | None:
    """A ConfigError naming the broken image among ``items`` (None when all decode)."""
    found = find_undecodable(items, image_size)
    if found is None:
        return None
    path, reason = found
    return ConfigError(
        f"cannot decode image {path!r} ({reason}) {where}: remove or replace the file"
    )


def _decoded_bytes(count: int, cfg: ImageSettings) -> int:
    """The size of ``count`` images decoded (uint8 RGB at --image-size)."""
    return count * cfg.image_size**2 * 3


def _fits_cache(count: int, cfg: ImageSettings) -> bool:
    return _decoded_bytes(count, cfg) <= cfg.cache_max_mb * 2**20


def _decoded_cache(
    pairs, count: int, cfg: ImageSettings, from_files: bool, items=None, where="in --image-dir"
):
    """Decodes ``(item, label)`` pairs once into uint8 [N, H, W, 3] images and labels.

    On the host; ``items`` (file paths) name an undecodable file, ``where`` its split.
    """
    import tensorflow as tf

    decode = _decoder(cfg.image_size, from_files)
    with tf.device("/cpu:0"):  # keep it out of accelerator memory
        ds = pairs.map(lambda x, y: (decode(x), y), num_parallel_calls=tf.data.AUTOTUNE)
        try:
            parts = list(ds.batch(1024).prefetch(2))
        except tf.errors.InvalidArgumentError:
            error = items is not None and undecodable_error(items, cfg.image_size, where)
            if error:
                raise error from None
            raise
        images = tf.concat([p[0] for p in parts], axis=0)
        labels = tf.concat([p[1] for p in parts], axis=0)
    log.info(
        "decoded %d images into a %.1f MB in-memory cache",
        count,
        _decoded_bytes(count, cfg) / 2**20,
    )
    return images, labels


# Consecutive records of a streamed (uncached) tfds split permuted together each epoch:
# encoded images held at once, so ~100 MB for photos of ~100 kB.
SHUFFLE_BUFFER = 1024


class Pipelines:
    """Builds the training and validation tf.data pipelines for one index."""

    def __init__(self, index: DataIndex, cfg: ImageSettings, seed: int):
        import tensorflow as tf

        self.cfg = cfg
        self.seed = seed
        self.index = index
        self.from_files = index.source == "image_dir"
        self.train = index.train
        self.val = index.val
        self.num_train = index.num_train
        self.train_cache = None  # (images, labels) decoded in memory, or None
        self.val_cache = None  # the same for an image folder's validation split
        self.train_stream = None  # a tfds split too large for the cache, streamed
        if self.from_files:
            with tf.device("/cpu:0"):
                self.train_items = tf.constant(self.train.items)
                self.train_labels = tf.constant(self.train.labels, tf.int32)
            if _fits_cache(self.num_train, cfg):
                pairs = tf.data.Dataset.from_tensor_slices((self.train_items, self.train_labels))
                self.train_cache = _decoded_cache(
                    pairs, self.num_train, cfg, True, items=self.train.items
                )
            if self.val is not None and len(self.val) and _fits_cache(len(self.val), cfg):
                # Now, not after the last step: a broken validation image fails the
                # run before any GPU time (the training split is checked the same way).
                pairs = tf.data.Dataset.from_tensor_slices((self.val.items, self.val.labels))
                self.val_cache = _decoded_cache(
                    pairs, len(self.val), cfg, True, items=self.val.items,
                    where="in the validation split of --image-dir",
                )  # fmt: skip
        else:
            stream = tfds_stream(index, index.tfds_splits[0])
            if _fits_cache(self.num_train, cfg):
                self.train_cache = _decoded_cache(stream, self.num_train, cfg, False)
            else:
                self.train_stream = stream
                log.info(
                    "tfds split %s: %d examples streamed (larger than --cache-max-mb %d once "
                    "decoded), permuted in windows of %d",
                    index.tfds_splits[0],
                    self.num_train,
                    cfg.cache_max_mb,
                    SHUFFLE_BUFFER,
                )

    def train_dataset(
        self,
        global_batch: int,
        start_step: int,
        total_steps: int,
        worker: slice | None = None,
        per_replica: int | None = None,
    ):
        """Steps ``start_step .. total_steps - 1``, step-deterministic.

        Args:
            global_batch: Examples per step across all replicas.
            start_step: The first step to produce.
            total_steps: The run's final step.
            worker: This worker's part of every global batch (``TrainInput.worker_slice``);
                ``None``: the whole global batch.
            per_replica: The batch of each element (``TrainInput.per_replica_batch``);
                ``None``: one element per step.
        """
        import tensorflow as tf

        n = self.num_train
        seed = self.seed
        first = start_step * global_batch  # flat position of the first example
        end = total_steps * global_batch
        epochs = tf.data.Dataset.range(first // n, math.ceil(end / n))
        per_step = (worker.stop - worker.start) if worker is not None else global_batch

        def step_batches(ds, skip):
            ds = ds.skip(skip).take(end - first).batch(global_batch, drop_remainder=True)
            if worker is not None:  # the worker's examples of every global batch
                ds = ds.map(lambda *parts: tuple(p[worker.start : worker.stop] for p in parts))
            return ds

        if self.train_stream is not None:
            stream = self.train_stream
            buffer = min(n, SHUFFLE_BUFFER)

            def epoch_stream(epoch):
                # Each window of `buffer` consecutive records is permuted by a stateless
                # seed of (seed, epoch, window): every epoch's order differs and is a
                # function of (seed, epoch) alone. (Dataset.shuffle cannot take a seed
                # computed per epoch inside flat_map.) tfds writes a split's records
                # already shuffled by key (`download_and_prepare`), so the windows need
                # not mix across the split.
                def permute(window, records):
                    images, labels = records
                    count = tf.shape(labels, out_type=tf.int64)[0]
                    epoch_seed = tf.stack([tf.cast(seed, tf.int64), epoch])
                    order = tf.random.experimental.stateless_shuffle(
                        tf.range(count),
                        seed=tf.random.experimental.stateless_fold_in(epoch_seed, window),
                    )
                    return tf.data.Dataset.from_tensor_slices(
                        (tf.gather(images, order), tf.gather(labels, order))
                    )

                return stream.batch(buffer).enumerate().flat_map(permute)

            decode = _decoder(self.cfg.image_size, from_files=False)
            ds = (
                # A stream cannot seek: its records (not decoded) up to the resumed
                # position in its epoch are read, at most one epoch.
                step_batches(epochs.flat_map(epoch_stream), first % n)
                .unbatch()
                .map(lambda x, y: (decode(x), y), num_parallel_calls=tf.data.AUTOTUNE)
                .batch(per_step, drop_remainder=True)
            )
        else:

            def epoch_order(epoch):
                perm = tf.random.experimental.stateless_shuffle(
                    tf.range(n, dtype=tf.int64), seed=tf.stack([tf.cast(seed, tf.int64), epoch])
                )
                # The resumed epoch from the resumed position: nothing before it is read.
                at = tf.where(epoch == first // n, tf.constant(first % n, tf.int64), 0)
                return tf.data.Dataset.from_tensor_slices(perm[at:])

            steps = step_batches(epochs.flat_map(epoch_order), 0)
            if self.train_cache is not None:
                images, labels = self.train_cache
                ds = steps.map(
                    lambda idx: (tf.gather(images, idx), tf.gather(labels, idx)),
                    num_parallel_calls=tf.data.AUTOTUNE,
                )
            else:
                decode = _decoder(self.cfg.image_size, self.from_files)
                items, labels = self.train_items, self.train_labels
                ds = (
                    steps.unbatch()
                    .map(
                        lambda i: (decode(tf.gather(items, i)), tf.gather(labels, i)),
                        num_parallel_calls=tf.data.AUTOTUNE,
                    )
                    .batch(per_step, drop_remainder=True)
                )
        if per_replica is not None:
            ds = ds.rebatch(per_replica, drop_remainder=True)
        options = tf.data.Options()
        options.deterministic = True
        return ds.with_options(options).prefetch(tf.data.AUTOTUNE)

    def items_for_steps(self, global_batch: int, first_step: int, last_step: int) -> list[str]:
        """The training files of steps ``first_step .. last_step`` (the same order as above)."""
        import tensorflow as tf

        n, seed, found = len(self.train), self.seed, []
        perms: dict[int, list[int]] = {}
        for position in range(first_step * global_batch, (last_step + 1) * global_batch):
            epoch, offset = divmod(position, n)
            if epoch not in perms:
                perms[epoch] = (
                    tf.random.experimental.stateless_shuffle(
                        tf.range(n, dtype=tf.int64), seed=tf.constant([seed, epoch], tf.int64)
                    )
                    .numpy()
                    .tolist()
                )
            found.append(self.train.items[perms[epoch][offset]])
        return found

    def val_dataset(self, batch_size: int):
        """The validation split in order, or None when there is none."""
        import tensorflow as tf

        if self.val_cache is not None:
            ds = tf.data.Dataset.from_tensor_slices(self.val_cache).batch(batch_size)
            return ds.prefetch(tf.data.AUTOTUNE)
        if self.from_files:
            if not self.val or not len(self.val):
                return None
            count = len(self.val)
            ds = tf.data.Dataset.from_tensor_slices((self.val.items, self.val.labels))
        else:
            split = self.index.tfds_splits[1]
            if not split:
                return None
            count = self.index.tfds_builder.info.splits[split].num_examples
            ds = tfds_stream(self.index, split)
        decode = _decoder(self.cfg.image_size, self.from_files)
        ds = ds.map(lambda x, y: (decode(x), y), num_parallel_calls=tf.data.AUTOTUNE)
        ds = ds.batch(batch_size)
        if _fits_cache(count, self.cfg):  # evaluated once per run, but the read is repeated
            ds = ds.cache()
        return ds.prefetch(tf.data.AUTOTUNE)
