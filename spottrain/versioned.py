"""Compare-and-swap of one small JSON object beside the checkpoints, local or Cloud Storage.

Two writers of one checkpoint dir (the lease's holder and a run it refuses, or a
holder and the JobSet-engine launcher annotating its ledger) must never overwrite
each other's change. ``fileio.write_json``'s rename makes a write atomic, not
ordered, so the files that more than one process changes go through here:

* ``gs://`` (and a ``/gcs/<bucket>/…`` FUSE path, which is that object): Cloud
  Storage generation preconditions (``if_generation_match``: 0 to create only if
  absent, the read generation to replace), with google-cloud-storage — what
  TensorFlow's gs:// file system does not offer;
* a local file: the same read-compare-write under ``fcntl.flock`` of
  ``<file>.lock`` beside it (one machine, or a file system with working locks).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from typing import Any

from spottrain import fileio, storage


class _LocalStore:
    """A local JSON file; its version is a counter inside it."""

    def __init__(self, path: str):
        self.path = path
        self.lock = f"{path}.lock"

    @contextlib.contextmanager
    def _locked(self):
        import fcntl

        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with open(self.lock, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _read(self) -> tuple[dict | None, Any]:
        try:
            with open(self.path) as f:
                record = json.load(f)
        except FileNotFoundError:
            return None, None
        except ValueError:
            return {}, -1  # not JSON: replaceable (callers decide whether to keep it)
        # (Any other OSError, e.g. a folder in its place, names this path: writing
        # there would fail too, naming only the temporary file beside it.)
        if not isinstance(record, dict):
            return {}, -1  # JSON, but no object: unreadable the same way
        return record, record.get("version", 0)

    def read(self) -> tuple[dict | None, Any]:
        with self._locked():
            return self._read()

    def swap(self, record: dict | None, expected: Any) -> Any:
        with self._locked():
            _, current = self._read()
            if current != expected:
                return False
            return self._put(record, expected)

    def _put(self, record: dict | None, expected: Any) -> Any:
        if record is None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)
            return None
        version = (expected if isinstance(expected, int) and expected >= 0 else 0) + 1
        fileio.write_json(self.path, {**record, "version": version}, sort_keys=False)
        return version

    def update(self, change: Callable[[dict | None], dict]) -> dict:
        with self._locked():
            current, version = self._read()
            new = change(current)
            self._put(new, version)
            return new


class _GcsStore:
    """A Cloud Storage object; its version is the object's generation."""

    def __init__(self, url: str):
        from google.api_core import exceptions as gexc

        from spottrain.storage import default_client

        bucket, _, self.blob_name = url[len("gs://") :].partition("/")
        self.bucket = default_client().bucket(bucket)
        # 412: the generation is no longer the one read. (A 404 on a create is a
        # missing bucket, which is no conflict; on a delete, the object is gone.)
        self.conflict = gexc.PreconditionFailed
        self.gone = gexc.NotFound

    def read(self) -> tuple[dict | None, Any]:
        blob = self.bucket.get_blob(self.blob_name)
        if blob is None:
            return None, None
        try:
            data = blob.download_as_bytes(if_generation_match=blob.generation)
        except (self.conflict, self.gone):
            return self.read()  # replaced or removed between the two calls
        try:
            record = json.loads(data)
        except ValueError:
            return {}, blob.generation
        return (record if isinstance(record, dict) else {}), blob.generation

    def swap(self, record: dict | None, expected: Any) -> Any:
        blob = self.bucket.blob(self.blob_name)
        try:
            if record is None:
                try:
                    blob.delete(if_generation_match=expected)
                except self.gone:
                    return False
                return None
            blob.upload_from_string(
                json.dumps(record, indent=2),
                content_type="application/json",
                if_generation_match=expected or 0,  # 0: only if absent
            )
        except self.conflict:
            return False
        return blob.generation

    def update(self, change: Callable[[dict | None], dict]) -> dict:
        while True:
            current, version = self.read()
            new = change(current)
            if self.swap(new, version) is not False:
                return new


def store(path: str):
    """The compare-and-swap store of the JSON file at ``path``.

    It has ``read() -> (data, version)`` (``(None, None)`` when absent, ``{}`` when
    unreadable: not JSON, or not a JSON object),
    ``swap(data_or_None, expected_version) -> new version or False``
    and ``update(change) -> data``, which applies ``change(current)`` atomically.
    """
    if path.startswith("gs://"):
        return _GcsStore(path)
    if path.startswith("/gcs/"):  # Vertex's Cloud Storage FUSE mount: the same object
        return _GcsStore("gs://" + path[len("/gcs/") :])
    if not storage.is_local(path):
        raise ValueError(f"{path!r}: only local paths, /gcs/ mounts and gs:// URLs")
    return _LocalStore(path)
