"""CRC32C of local files, and the two caches that spare a rerun from reading them again."""

from __future__ import annotations

import base64
import os
import time

import google_crc32c

from spottrain.gcs_copy.locations import _Entry
from spottrain.gcs_copy.safe_open import _open_regular

_READ_CHUNK = 2**20
# Custom metadata on uploaded objects: the local file's identity when it was
# uploaded, so that a rerun can skip an unchanged file without reading it.
_UPLOAD_META = "spottrain-local-file"


def _crc_b64(digest: bytes) -> str:
    """Encodes a CRC32C digest as GCS reports it (base64 of 4 big-endian bytes)."""
    return base64.b64encode(digest).decode("ascii")


def _file_crc32c(path: str, *, store: bool = False, real_root: str | None = None) -> str:
    """CRC32C of a regular file's content; ``store`` caches it in the file's xattr.

    ``real_root``: the file must resolve inside it (see ``safe_open``). The cache is
    written through the open descriptor, so never onto another file than the one read.
    """
    with open(_open_regular(path, real_root=real_root), "rb", buffering=0) as f:
        before = os.fstat(f.fileno()) if store else None
        checksum = google_crc32c.Checksum()
        while chunk := f.read(_READ_CHUNK):
            checksum.update(chunk)
        value = _crc_b64(checksum.digest())
        if store:
            _store_crc(f.fileno(), value, before)
    return value


# The CRC32C of a local file we wrote or hashed is cached in an extended attribute,
# so that a rerun over an unchanged tree need not read every byte again. It is
# trusted only while the file's size, mtime and inode are unchanged AND its ctime
# is no later than when the cache was written (ctime changes on every write,
# truncate, utime or rename, and cannot be set back by users), so content
# changed after caching is always hashed again. Filesystems without user xattrs
# just hash every time.
_XATTR = "user.spottrain.crc32c"
_CTIME_SLACK_NS = 50_000_000  # the kernel stamps ctime from a coarse clock


def _cached_crc(path: str, st: os.stat_result | None) -> str | None:
    if not hasattr(os, "getxattr"):
        return None
    try:
        if st is None:
            st = os.stat(path)
        fields = os.getxattr(path, _XATTR).decode("ascii").split()
    except (OSError, UnicodeDecodeError):
        return None
    if len(fields) != 6 or fields[0] != "v1":
        return None
    value, size, mtime_ns, ino, stamp_ns = fields[1:]
    if (
        st.st_size == int(size)
        and st.st_mtime_ns == int(mtime_ns)
        and st.st_ino == int(ino)
        and st.st_ctime_ns <= int(stamp_ns) + _CTIME_SLACK_NS
    ):
        return value
    return None


def _upload_record(st: os.stat_result, value: str) -> str:
    """The local file's identity and CRC32C, stored on the object it was uploaded to.

    ``st`` is from before the file was hashed, so a change while hashing leaves
    a record that no longer matches. ctime is in it for the reason given above.
    """
    return f"v1 {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino} {value}"


def _crc_from_upload_record(st: os.stat_result, existing: _Entry) -> str | None:
    """The CRC32C of an unchanged local file that ``existing`` was uploaded from."""
    metadata = getattr(existing.blob, "metadata", None) or {}
    fields = str(metadata.get(_UPLOAD_META, "")).split()
    if len(fields) != 6 or fields[0] != "v1" or fields[5] != existing.crc32c:
        return None
    if [str(st.st_size), str(st.st_mtime_ns), str(st.st_ctime_ns), str(st.st_ino)] != fields[1:5]:
        return None
    return fields[5]


def _store_crc(path: str | int, value: str, before: os.stat_result | None = None) -> None:
    """Caches ``value`` as the CRC32C of ``path`` or open descriptor (best effort).

    ``before``: the file's stat from before it was hashed; if it changed while
    being hashed, nothing is cached.
    """
    if not hasattr(os, "setxattr"):
        return
    try:
        st = os.stat(path)
        if before is not None and (
            (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            != (before.st_size, before.st_mtime_ns, before.st_ctime_ns, before.st_ino)
        ):
            return
        stamp = time.time_ns()
        record = f"v1 {value} {st.st_size} {st.st_mtime_ns} {st.st_ino} {stamp}"
        os.setxattr(path, _XATTR, record.encode("ascii"))
    except OSError:
        pass  # read-only, no xattr support, or gone: the cache is only an optimisation
