"""Local disk: walking a tree, safe names, locked temp files and verified atomic writes."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import stat

import google_crc32c

from spottrain.copier.checksums import _READ_CHUNK, _crc_b64, _file_crc32c
from spottrain.copier.failures import _Corrupt, _Fatal, _one_line
from spottrain.copier.locations import _Entry
from spottrain.copier.results import CopyError
from spottrain.copier.safe_open import _inside, _kind, _open_regular

# One logger for the whole package, named after it, so that configuring
# ``spottrain.copier`` covers every module.
log = logging.getLogger(__package__)

_WRITE_BUFFER = 2**16
_TEMP_RE = re.compile(r"^\.spottrain-[0-9a-f]{12}\.part$")


def _is_temp(name: str) -> bool:
    return bool(_TEMP_RE.match(name))


def _unsafe_local_name(rel: str) -> str | None:
    """Why an object name cannot be written under a local directory, or None."""
    if rel.startswith("/") or os.path.isabs(rel):
        return "absolute path"
    if "\x00" in rel:
        return "NUL byte"
    parts = rel.split("/")
    if ".." in parts:
        return "'..' component"
    if "." in parts or "" in parts:
        return "empty or '.' component"
    if os.sep != "/" and any(os.sep in p or (os.altsep and os.altsep in p) for p in parts):
        return "path separator inside a component"
    if any(_is_temp(p) for p in parts):
        return "name reserved for temp files"
    return None


def _list_local(
    root: str, *, source: bool = False, follow_symlinks: bool = False
) -> tuple[dict[str, _Entry], list[str], list[str]]:
    """Walks ``root``: (files by relative "/" name, our temp files, ignored paths).

    As a source (``source=True``) a symlink (to a file or a directory) that
    stays inside ``root`` is followed: a class folder that is a link is copied,
    not silently dropped. One that leaves ``root`` is refused, since it would
    upload whatever it points at (``/etc/passwd`` was tried), unless
    ``follow_symlinks`` says to copy it. FIFOs, sockets and devices are skipped
    with a warning and returned as ignored (reading a FIFO would wait forever).

    As a destination, symlinked directories are not descended into, like
    ``os.walk``, and symlinks to files inside ``root`` are read as files. A
    symlink leading outside ``root`` and a file that is not regular are listed
    with ``unusable`` set: the planner refuses them, so nothing is read through
    them, written through them or put in their place.
    """
    entries: dict[str, _Entry] = {}
    temps: list[str] = []
    ignored: list[str] = []
    cut = len(os.path.join(root, ""))
    real_root = os.path.realpath(root)
    # Each folder to read, with the real paths of the folders above it: a symlink
    # back to one of those is a loop, not more files.
    pending: list[tuple[str, frozenset[str]]] = [(root, frozenset({real_root}))]
    while pending:
        directory, above = pending.pop()
        try:
            with os.scandir(directory) as it:
                items = list(it)
        except PermissionError as exc:
            raise CopyError(f"permission denied reading {directory}") from exc
        except OSError as exc:
            raise CopyError(f"cannot read {directory}: {exc.strerror}") from exc
        for item in items:
            is_link = item.is_symlink()
            target = os.path.realpath(item.path) if is_link else ""
            leaves = is_link and not _inside(target, real_root)
            if source and leaves and not follow_symlinks:
                raise CopyError(
                    f"{item.path} is a symlink to {target}, outside the source "
                    f"{root}: pass --follow-symlinks to copy what it points to"
                )
            if item.is_dir(follow_symlinks=source and is_link):
                real = os.path.realpath(item.path)
                if real in above:
                    log.warning("skipping %s: a symlink back to a folder above it", item.path)
                else:
                    pending.append((item.path, above | {real}))
                continue
            if _is_temp(item.name):
                temps.append(item.path)
                continue
            rel = item.path[cut:]
            if os.sep != "/":
                rel = rel.replace(os.sep, "/")
            if leaves and not source:
                why = f"a symlink to {target}, outside the destination"
                entries[rel] = _Entry(rel, 0, unusable=why)
                continue
            try:
                st = item.stat()  # follows symlinks
            except FileNotFoundError:
                continue  # a dangling symlink, or deleted while walking
            except PermissionError as exc:
                raise CopyError(f"permission denied reading {item.path}") from exc
            if stat.S_ISDIR(st.st_mode):
                continue  # a destination's symlinked folder
            if not stat.S_ISREG(st.st_mode):
                why = f"not a regular file ({_kind(st.st_mode)})"
                if source:
                    log.warning("skipping %s: %s", item.path, why)
                    ignored.append(item.path)
                else:
                    entries[rel] = _Entry(rel, st.st_size, stat=st, unusable=why)
                continue
            entries[rel] = _Entry(rel, st.st_size, stat=st)
    return entries, temps, ignored


def _try_remove_unlocked(path: str) -> bool:
    """Removes a temp file unless a live copy holds its lock; True if removed.

    The lock is held from before the check to after the unlink, and a writer
    checks after taking its lock that its file still has its name
    (``_TempFile.__enter__``): so a file whose writer is between creating and
    locking it is either left alone or noticed gone by that writer. Anything
    that is not a regular file (say, a FIFO of someone else's under a name like
    ours) is neither opened nor removed.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX: cannot tell live from dead; leave it
        return False
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            return False
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False  # gone, a link, or unreadable: not ours to remove
    try:
        if not _same_file(os.fstat(fd), st):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # locked: a running copy is writing it
        try:
            if not _same_file(os.lstat(path), st):
                return False  # the name now belongs to another file
        except FileNotFoundError:
            return False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return True
    finally:
        os.close(fd)  # also releases the lock


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class _TempFile:
    """A locked hidden temp file next to the target, renamed into place when done.

    The writer holds an exclusive ``flock`` for the file's whole life, so a later
    run can tell the temp file of a killed copy (no lock) from that of a running
    one and remove only the former.
    """

    def __init__(self, directory: str):
        self.path = os.path.join(directory, f".spottrain-{secrets.token_hex(6)}.part")
        self._fd = -1
        self._file = None
        self._crc = google_crc32c.Checksum()

    def __enter__(self) -> _TempFile:
        try:
            import fcntl
        except ImportError:  # not POSIX: no locks, and no cleanup that needs them
            fcntl = None
        directory = os.path.dirname(self.path)
        for _ in range(100):
            try:
                # O_EXCL: never opens an existing file, nor follows a link at the name.
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            except FileExistsError:  # someone else's file under this random name
                self.path = os.path.join(directory, f".spottrain-{secrets.token_hex(6)}.part")
                continue
            if fcntl is None:
                break
            # Created and locked are two steps: a concurrent run's cleanup may lock
            # and remove the file in between (it removes only while holding the
            # lock, see _try_remove_unlocked). If it holds the lock now, or has
            # removed the file already, start again under a new name. Never
            # waiting for the lock leaves no blocking point here.
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _same_file(os.lstat(self.path), os.fstat(fd)):
                    break
            except (BlockingIOError, FileNotFoundError):
                pass
            os.close(fd)
            self.path = os.path.join(directory, f".spottrain-{secrets.token_hex(6)}.part")
        else:
            raise OSError(errno.EAGAIN, "could not create a temp file", directory)
        self._fd = fd
        # On the locked fd itself (closefd=False: no dup, no second close). 64 KiB
        # gathers the client's 8 KB pieces of a streamed download into fewer
        # writes, while a one-shot 100 KB object bypasses the buffer; the former
        # 1 MiB buffer was a fresh allocation per file (measured with 2,000 temp
        # files of 100 KB: 10-15 us less CPU per file, ~30 % of the temp file's
        # cost over a plain open/write/close).
        self._file = open(self._fd, "wb", buffering=_WRITE_BUFFER, closefd=False)
        return self

    def write(self, data: bytes) -> int:
        self._crc.update(data)
        return self._file.write(data)

    def crc32c(self) -> str:
        return _crc_b64(self._crc.digest())

    def flush(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.flush()

    def close_for_external_writer(self) -> None:
        """Lets another writer (transfer_manager) fill the file by name; lock kept."""
        self._file.close()

    def publish(self, target: str, *, replace: bool, durable: bool) -> None:
        """Renames onto ``target``; without ``replace``, never over an existing file.

        ``durable`` fsyncs first, so that after a crash the name cannot point at
        data that never reached the disk.
        """
        self.flush()
        if durable:
            os.fsync(self._fd)
        if replace:
            os.replace(self.path, target)
        else:
            # link() fails if target exists: an atomic "create only".
            try:
                os.link(self.path, target)
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                    raise
                # Filesystems without hard links: check, then rename (racy, best effort).
                if os.path.lexists(target):
                    raise FileExistsError(errno.EEXIST, "exists", target) from exc
                os.replace(self.path, target)
            else:
                os.unlink(self.path)
        self.path = ""

    def __exit__(self, *exc: object) -> None:
        if self._file is not None and not self._file.closed:
            with contextlib.suppress(OSError):
                self._file.close()
        if self.path:  # not published: remove the partial data
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        if self._fd >= 0:
            os.close(self._fd)  # also releases the lock
            self._fd = -1


class _LocalWriter:
    """The copy job's writes to local disk: via a temp file, verified, then renamed.

    A mixin of ``planner._Copy``: it uses the job's ``src``, ``no_clobber``,
    ``_dst_dirs_made``, ``_dst_real_root`` and ``_lock``, and its ``_retrying``,
    ``_src_url`` and ``_download`` (``gcs_io._GcsIO``).
    """

    def _local_parent(self, target: str) -> str | None:
        """Creates the target's directory; returns why it cannot, or None."""
        parent = os.path.dirname(target)
        if parent not in self._dst_dirs_made:
            try:
                os.makedirs(parent, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                return "a file of the same name as a parent directory exists"
            real = os.path.realpath(parent)
            if not _inside(real, self._dst_real_root):
                return f"its directory resolves outside the destination, to {real}"
            with self._lock:
                self._dst_dirs_made.add(parent)
        return None

    def _to_local(self, entry: _Entry, target: str, exists: bool) -> tuple[str, str]:
        problem = self._local_parent(target)
        if problem:
            return "refused", problem
        if os.path.isdir(target):
            return "refused", "a directory of the same name exists"

        def attempt() -> None:
            with _TempFile(os.path.dirname(target)) as tmp:
                if self.src.is_gcs:
                    got = self._download(entry, tmp)
                else:
                    got = self._local_copy(entry, tmp)
                if got != entry.crc32c:
                    raise _Corrupt(
                        f"CRC32C mismatch after copy: source {entry.crc32c}, destination {got}"
                    )
                # fsync only in no-clobber mode: after a power loss, a published but
                # empty file would be refused there forever, whereas in clobber mode
                # the next run sees the CRC32C differ and copies it again anyway.
                tmp.publish(target, replace=exists or not self.no_clobber, durable=self.no_clobber)

        try:
            self._retrying(attempt, f"writing {target}")
        except FileExistsError:
            # Another copy (say, an overlapping retry) may have put the same file there.
            try:
                if _file_crc32c(target, real_root=self._dst_real_root) == entry.crc32c:
                    return "skipped", ""
            except OSError as exc:  # a FIFO or a link out, planted meanwhile: not read
                return "refused", f"created by someone else during the copy: {exc.strerror}"
            return "refused", "created by someone else during the copy, no-clobber"
        except IsADirectoryError:
            return "refused", "a directory of the same name exists"
        except FileNotFoundError as exc:
            if not self.src.is_gcs:
                return "failed", f"source deleted during the copy: {exc.filename}"
            raise
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise _Fatal(f"no space left on device writing {target}") from exc
            raise
        except Exception as exc:
            from google.api_core import exceptions as api

            if isinstance(exc, api.NotFound):
                return "failed", f"source changed or deleted during the copy ({_one_line(exc)})"
            raise
        return "copied", ""

    def _local_copy(self, entry: _Entry, tmp: _TempFile) -> str:
        with open(_open_regular(self._src_url(entry)), "rb") as f:
            while chunk := f.read(_READ_CHUNK):
                tmp.write(chunk)
        streamed = tmp.crc32c()
        if entry.crc32c is None:
            entry.crc32c = streamed
        elif entry.crc32c != streamed:
            raise _Corrupt(f"source changed during the copy: {self._src_url(entry)}")
        tmp.flush()
        # Read back what landed in the file: local->local has no server to vouch for it.
        return _file_crc32c(tmp.path)
