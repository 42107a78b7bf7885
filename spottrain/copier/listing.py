"""What is where: the files under SRC, the destination root and what is already there."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable

from spottrain import storage
from spottrain.copier.local_files import _is_temp, _list_local, _try_remove_unlocked
from spottrain.copier.locations import _check_overlap, _Entry
from spottrain.copier.results import CopyError
from spottrain.copier.safe_open import _inside, _kind

# One logger for the whole package, named after it, so that configuring
# ``spottrain.copier`` covers every module.
log = logging.getLogger(__package__)


class _Listing:
    """The copy job's first step: find the source files and the destination's state.

    A mixin of ``planner._Copy``: it reads the job's ``src``, ``dst`` and ``dry_run``,
    sets ``single``, ``dst_root``, ``existing`` and ``_dst_real_root``, and lists GCS
    through the job's ``_GcsIO`` methods.
    """

    def _resolve(self, allow_empty: bool) -> dict[str, _Entry]:
        """Lists source and destination; sets the destination root and index."""
        src, dst = self.src, self.dst
        _check_overlap(src, dst)
        single_name: str | None = None  # the source's base name in single-file mode
        if src.is_gcs:
            prefix = src.dir_prefix
            sources, markers = self._list_gcs(src, prefix)
            if not sources and src.path and not src.path.endswith("/"):
                one = self._get_gcs(src, src.path)
                if one is not None:
                    sources, single_name = {one.rel: one}, one.rel
            if not sources and not allow_empty:
                if markers:
                    raise CopyError(
                        f"source is empty: {src.url(prefix)} (pass --allow-empty to copy nothing)"
                    )
                raise CopyError(
                    f"source not found: {src.url()} (no such object and nothing under "
                    f"{src.url(prefix)})"
                )
        else:
            if not os.path.lexists(src.path):
                raise CopyError(f"source not found: {src.path}")
            if os.path.isfile(src.path):
                if not os.access(src.path, os.R_OK):
                    raise CopyError(f"permission denied reading {src.path}")
                single_name = os.path.basename(src.path)
                st = os.stat(src.path)
                sources = {single_name: _Entry(single_name, st.st_size, stat=st)}
            elif os.path.isdir(src.path):
                if not os.access(src.path, os.R_OK | os.X_OK):
                    raise CopyError(f"permission denied reading {src.path}")
                sources, _, ignored = _list_local(
                    src.path, source=True, follow_symlinks=self.follow_symlinks
                )
                self.summary.ignored.extend(ignored)
                if not sources and not allow_empty:
                    raise CopyError(
                        f"source is empty: {src.path} (pass --allow-empty to copy nothing)"
                    )
            else:
                raise CopyError(f"source is not a file or directory: {src.path}")

        self.single = single_name is not None
        if self.single:
            self._resolve_single_dst(sources, single_name)
        elif dst.is_gcs:
            self.dst_root = dst.dir_prefix
            self.existing, _ = self._list_gcs(dst, self.dst_root)
        else:
            self.dst_root = dst.path
            if os.path.lexists(dst.path) and not os.path.isdir(dst.path):
                raise CopyError(f"destination is not a directory: {dst.path}")
            blocked = storage.folder_problem(dst.path)
            if blocked:
                raise CopyError(f"destination {dst.path} cannot be created: {blocked}")
            if not self.dry_run:  # read-only, full or refusing: one line before any file
                try:
                    os.makedirs(dst.path, exist_ok=True)
                except PermissionError:
                    raise CopyError(f"permission denied: {dst.path}") from None
                except OSError as exc:
                    raise CopyError(
                        f"destination {dst.path} cannot be created: {exc.strerror}"
                    ) from None
                if not os.access(dst.path, os.W_OK | os.X_OK):
                    raise CopyError(f"destination {dst.path} is not writable")
            if os.path.isdir(dst.path):
                self.existing, temps, _ = _list_local(dst.path)
                self._remove_stale_temps(temps)
        self._dst_real_root = "" if dst.is_gcs else os.path.realpath(self.dst_root)
        if dst.is_gcs and not src.is_gcs:
            self._refuse_non_utf8(sources)
        return sources

    def _refuse_non_utf8(self, sources: dict[str, _Entry]) -> None:
        """Refuses, before anything is uploaded, local names that are not UTF-8.

        GCS object names are UTF-8. Python reads undecodable bytes of a file name
        as lone surrogates, which the client would upload under a different
        (replacement-character) name, after which every rerun fails to encode the
        name. Renaming silently would break the mirror; the user renames instead.
        (Local-to-local copies keep such names byte for byte.)
        """
        bad = []
        for rel in sources:
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:
                bad.append(rel)
        if bad:
            path = os.fsencode(self.src.path if self.single else self._src_url(sources[bad[0]]))
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise CopyError(
                f"file name is not UTF-8, which GCS object names must be: {path!r}{more}; "
                "rename it (nothing was uploaded)"
            )

    def _resolve_single_dst(self, sources: dict[str, _Entry], name: str) -> None:
        """Single-file mode: DST is the target, or a directory/prefix to put it in."""
        dst = self.dst
        entry = sources[name]
        if dst.is_gcs:
            into = not dst.path or dst.path.endswith("/")
            target = dst.path + name if into else dst.path
            self.dst_root, _, rel = target.rpartition("/")
            self.dst_root += "/" if self.dst_root else ""
            self._bucket_exists(dst)
            found = self._get_gcs(dst, target)
        else:
            into = os.path.isdir(dst.path) or dst.raw.endswith(("/", os.sep))
            target = os.path.join(dst.path, name) if into else dst.path
            if os.path.isdir(target):
                raise CopyError(f"destination is a directory: {target}")
            self.dst_root, rel = os.path.split(target)
            found = _local_target(target, rel)
            if os.path.isdir(self.dst_root):
                self._remove_stale_temps(
                    os.path.join(self.dst_root, n) for n in os.listdir(self.dst_root) if _is_temp(n)
                )
        if self.src.is_gcs is False and not dst.is_gcs:
            if os.path.realpath(self.src.path) == os.path.realpath(target):
                raise CopyError(f"source and destination are the same file: {target}")
        # Re-key the entry by its destination name; the source path is kept in src.
        entry.rel = rel
        sources.clear()
        sources[rel] = entry
        self.existing = {rel: found} if found is not None else {}

    def _remove_stale_temps(self, temps: Iterable[str]) -> None:
        """Deletes temp files of dead copies (they hold no lock; live ones do)."""
        for path in temps:
            if self.dry_run:
                log.info("would remove stale temp file %s", path)
            elif _try_remove_unlocked(path):
                log.info("removed stale temp file %s", path)


def _local_target(target: str, rel: str) -> _Entry | None:
    """What is at a single-file copy's local target, like ``_list_local`` sees it."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        real = os.path.realpath(target)
        if not _inside(real, os.path.realpath(os.path.dirname(target))):
            return _Entry(rel, 0, unusable=f"a symlink to {real}, outside the destination")
        try:
            st = os.stat(target)
        except FileNotFoundError:
            return None  # dangling inside: replaced like a missing file
    if not stat.S_ISREG(st.st_mode):
        why = f"not a regular file ({_kind(st.st_mode)})"
        return _Entry(rel, st.st_size, stat=st, unusable=why)
    return _Entry(rel, st.st_size, stat=st)
