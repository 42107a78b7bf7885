"""Where files are: SRC and DST parsed, one file's listing entry, and the overlap check."""

from __future__ import annotations

import dataclasses
import os
import re
from typing import TYPE_CHECKING

from spottrain.copier.results import CopyError
from spottrain.storage import GCS_BUCKET

if TYPE_CHECKING:
    from google.cloud import storage


@dataclasses.dataclass(frozen=True)
class _Loc:
    """A parsed SRC or DST: a GCS bucket and object name/prefix, or a local path."""

    raw: str
    bucket: str | None  # None: local
    path: str  # object name or prefix (no leading "/"), or an absolute local path

    @property
    def is_gcs(self) -> bool:
        return self.bucket is not None

    def url(self, name: str | None = None) -> str:
        """Display form of this location or of a name inside it."""
        path = self.path if name is None else name
        return f"gs://{self.bucket}/{path}" if self.is_gcs else path

    @property
    def dir_prefix(self) -> str:
        """The prefix naming "everything under it" (``a/b`` -> ``a/b/``)."""
        if not self.is_gcs:
            return self.path.rstrip(os.sep) + os.sep
        return self.path if not self.path or self.path.endswith("/") else self.path + "/"


def _parse(raw: str, role: str) -> _Loc:
    if not raw:
        raise CopyError(f"{role} is empty")
    if raw.startswith("gs://"):
        bucket, _, path = raw[len("gs://") :].partition("/")
        if not GCS_BUCKET.match(bucket):
            raise CopyError(f"invalid bucket name in {role}: {raw!r}")
        # Object names are literal: "a/../x" or "a//x" would create objects with those
        # names, which no folder-like tool (and not our own download) maps back.
        segments = path.rstrip("/").split("/") if path else []
        if role == "destination" and any(seg in ("", ".", "..") for seg in segments):
            raise CopyError(
                f"{role} {raw!r} has an empty, '.' or '..' path segment: object names are "
                "literal in GCS; write the prefix out"
            )
        return _Loc(raw, bucket, path)
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", raw):
        raise CopyError(f"unsupported {role} {raw!r}: use gs://bucket/prefix or a local path")
    return _Loc(raw, None, os.path.abspath(os.path.expanduser(raw)))


@dataclasses.dataclass
class _Entry:
    """One file/object: where it is and what we know about its content."""

    rel: str  # name relative to the root, "/"-separated
    size: int
    crc32c: str | None = None  # known for GCS; computed lazily for local files
    generation: int | None = None
    blob: storage.Blob | None = None  # the listed source object (pins its generation)
    stat: os.stat_result | None = None  # local files: as listed
    # A local destination path that is neither read nor replaced, and why: a
    # symlink leading outside DST, or not a regular file (a FIFO would block reads).
    unusable: str | None = None


def _check_overlap(src: _Loc, dst: _Loc) -> None:
    """Refuses equal SRC and DST, and a DST inside SRC (a copy into itself)."""
    if src.is_gcs != dst.is_gcs:
        return
    if src.is_gcs:
        if src.bucket != dst.bucket:
            return
        a, b = src.dir_prefix, dst.dir_prefix
    else:
        a = os.path.realpath(src.path).rstrip(os.sep) + os.sep
        b = os.path.realpath(dst.path).rstrip(os.sep) + os.sep
    if a == b:
        raise CopyError(f"source and destination are the same: {src.raw}")
    # The other way round (SRC inside DST) is harmless: SRC's files land next to it.
    if b.startswith(a):
        raise CopyError(f"destination {dst.raw} is inside source {src.raw}")
