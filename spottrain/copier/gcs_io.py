"""Everything said to GCS: the client, listings, uploads, rewrites and downloads."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from spottrain.copier.failures import _Corrupt, _Fatal, _is_transient, _one_line
from spottrain.copier.local_files import _TempFile
from spottrain.copier.locations import _Entry, _Loc
from spottrain.copier.results import EXIT_UNAVAILABLE, CopyError

if TYPE_CHECKING:
    from google.cloud import storage

# Sliced (ranged, parallel) downloads pay off against real GCS for big objects;
# against a local server they are slower than one stream (measured: 50 MB in
# 0.19 s sliced vs 0.11 s whole), so only objects above this size are sliced.
SLICED_DOWNLOAD_THRESHOLD = 256 * 2**20
SLICED_DOWNLOAD_CHUNK = 32 * 2**20
# Objects up to this size are fetched in one read instead of 8 KB pieces: 15 % less
# CPU for 100 KB objects (measured; small downloads are bound by the client's
# per-request CPU). Bigger ones are streamed: a one-shot read needs a fresh buffer
# of the object's size, whose pages the kernel must supply anew on every download
# (glibc maps big buffers afresh each time); streaming reuses small ones. Measured
# over 9 consecutive 50 MB downloads: 0.32 s median one-shot (0.08 s only the
# first time), 0.14 s streamed.
SINGLE_SHOT_MAX = 2**20
_LIST_FIELDS = "items(name,size,crc32c,generation),nextPageToken"

T = TypeVar("T")


# What requests reads from the environment on every request while its session's
# trust_env is on (requests 2.33.0: sessions.py merge_environment_settings, line 753,
# and prepare_request, line 484; utils.py get_netrc_auth, line 206, and
# get_environ_proxies, line 816): proxy variables, these, and ~/.netrc or ~/_netrc.
_REQUESTS_ENV = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NETRC")
_NETRC_FILES = ("~/.netrc", "~/_netrc")


def default_client(connections: int = 10) -> storage.Client:
    """A client for real GCS, or for ``STORAGE_EMULATOR_HOST`` with anonymous credentials.

    Args:
        connections: connections kept open per host: the copy's worker count, so that
            no worker's connection is thrown away and reopened (requests keeps 10, and
            urllib3 logs a "Connection pool is full" warning for each one it drops).

    Raises:
        CopyError: no Google Cloud credentials.
    """
    from google.auth import exceptions as auth
    from google.cloud import storage

    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        from urllib.parse import urlsplit

        # "Despite name, includes scheme." (google-cloud-storage 3.x _helpers.py:49)

        parts = urlsplit(emulator)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CopyError(
                f"STORAGE_EMULATOR_HOST {emulator!r} is not a URL like http://127.0.0.1:4443"
            )
        from google.auth.credentials import AnonymousCredentials

        project = os.environ.get("GOOGLE_CLOUD_PROJECT", "test")
        client = storage.Client(project=project, credentials=AnonymousCredentials())
    else:
        try:
            client = storage.Client()
        except auth.DefaultCredentialsError as exc:
            raise CopyError(f"no Google Cloud credentials: {_one_line(exc)}") from exc
    _read_environment_once(client)
    _pool_connections(client, connections)
    return client


def _pool_connections(client: storage.Client, connections: int) -> None:
    """Keeps ``connections`` open per host on this package's own client.

    google-cloud-storage's session is a ``requests.Session`` (``Client._http``, as in
    ``_read_environment_once``) with requests' default adapters of 10 connections a host;
    the library has no option for it. Mounting an adapter of the same defaults with a
    larger pool is what requests documents for many threads. Any other adapter (an
    mTLS one google.auth mounts for client certificates) is left as it is.
    """
    if connections <= 10:
        return
    from requests.adapters import HTTPAdapter

    for prefix in ("https://", "http://"):
        if type(client._http.get_adapter(prefix + "x")) is HTTPAdapter:
            client._http.mount(prefix, HTTPAdapter(pool_maxsize=connections))


def _read_environment_once(client: storage.Client) -> None:
    """Spares requests its per-request scan of the environment when it has nothing to find.

    With ``trust_env`` on, requests walks all of ``os.environ`` for proxy settings
    and looks for ~/.netrc on every request: bench/copy.py --down-only measured the
    download of 200 x 100 KB 1.15x [0.93-1.19] faster at 20 ms RTT with it off
    (1.08x at 0 ms, 1.10x at 50 ms; 7 runs, docs/benchmarks.md, "Downloads after issue 13")
    (a pod's environment, with a variable per Kubernetes service, is often longer
    than the bench's). Turned off only when no proxy, CA bundle or netrc variable
    is set and no netrc file exists, so no setting is ignored, and only on a client
    this package made: a caller's client is never changed. The storage client has
    no public option for its session's settings, hence its ``_http``
    (google-cloud-core ``Client._http``: google.auth's ``AuthorizedSession``, a
    ``requests.Session``).
    """
    import urllib.request

    if (
        urllib.request.getproxies_environment()
        or any(os.environ.get(v) for v in _REQUESTS_ENV)
        or any(os.path.exists(os.path.expanduser(f)) for f in _NETRC_FILES)
    ):
        return
    client._http.trust_env = False


class _GcsIO:
    """The copy job's calls to GCS: listing, reading metadata, writing, downloading.

    A mixin of ``planner._Copy``: it uses the job's ``client``, ``src``, ``dst``,
    ``dst_root``, ``workers``, ``sliced_threshold`` and ``no_clobber``, and its
    ``_retrying``, ``_src_url`` and ``_dst_url``.
    """

    # -- listing and reading ----------------------------------------------------------

    def _gcs_call(self, fn: Callable[[], T], what: str, bucket: str) -> T:
        """A listing/metadata call with retries and the clear bucket/permission errors."""
        from google.api_core import exceptions as api

        try:
            return self._retrying(fn, what)
        except api.NotFound as exc:
            raise CopyError(f"bucket not found: gs://{bucket}") from exc
        except (api.Forbidden, api.Unauthorized) as exc:
            raise CopyError(f"permission denied {what}: {_one_line(exc)}") from exc
        except Exception as exc:
            if _is_transient(exc):
                raise CopyError(
                    f"giving up {what}: {_one_line(exc)}", exit_code=EXIT_UNAVAILABLE
                ) from exc
            raise

    def _list_gcs(self, loc: _Loc, prefix: str) -> tuple[dict[str, _Entry], int]:
        """Lists objects under ``prefix``: (entries by relative name, folder markers)."""
        assert self.client is not None and loc.bucket is not None
        what = f"listing {loc.url(prefix)}"

        def listing() -> list:
            return list(
                self.client.list_blobs(loc.bucket, prefix=prefix, fields=_LIST_FIELDS, retry=None)
            )

        entries: dict[str, _Entry] = {}
        markers = 0
        for blob in self._gcs_call(listing, what, loc.bucket):
            rel = blob.name[len(prefix) :]
            if blob.name.endswith("/") and not blob.size:
                markers += 1  # a console "folder": nothing to copy
                continue
            entries[rel] = _Entry(rel, blob.size or 0, blob.crc32c, blob.generation, blob)
        return entries, markers

    def _get_gcs(self, loc: _Loc, name: str) -> _Entry | None:
        assert self.client is not None and loc.bucket is not None
        bucket = self.client.bucket(loc.bucket)
        blob = self._gcs_call(
            lambda: bucket.get_blob(name, retry=None), f"reading {loc.url(name)}", loc.bucket
        )
        if blob is None:
            return None
        return _Entry(name.rsplit("/", 1)[-1], blob.size or 0, blob.crc32c, blob.generation, blob)

    def _bucket_exists(self, loc: _Loc) -> None:
        """Raises the clear error when ``loc``'s bucket is missing or unreadable."""
        assert self.client is not None and loc.bucket is not None
        self._gcs_call(
            lambda: list(
                self.client.list_blobs(loc.bucket, max_results=1, fields="items(name)", retry=None)
            ),
            f"listing gs://{loc.bucket}",
            loc.bucket,
        )

    # -- writing to GCS ---------------------------------------------------------------

    def _to_gcs(self, entry: _Entry, existing: _Entry | None) -> tuple[str, str]:
        from google.api_core import exceptions as api

        assert self.client is not None and self.dst.bucket is not None
        name = self.dst_root + entry.rel
        bucket = self.client.bucket(self.dst.bucket)
        # The generation we compared against; 0 = "must not exist". A retry after a
        # lost response then fails the precondition instead of writing twice.
        state = {"if_generation_match": existing.generation if existing else 0}

        def attempt() -> storage.Blob:
            blob = bucket.blob(name)
            try:
                if self.src.is_gcs:
                    self._rewrite(blob, entry, state["if_generation_match"])
                else:
                    # Sent in the object resource: production GCS rejects the upload
                    # if the bytes it received do not match; the emulator ignores it,
                    # hence the comparison below as well.
                    blob.crc32c = entry.crc32c
                    blob.upload_from_filename(
                        self._src_url(entry),
                        if_generation_match=state["if_generation_match"],
                        checksum=None,
                        retry=None,
                    )
            except api.PreconditionFailed:
                # Someone else wrote it since we looked, or our own earlier attempt
                # succeeded and only its response was lost. Tell them apart by content.
                now = bucket.get_blob(name, retry=None)
                if now is not None and now.size == entry.size and now.crc32c == entry.crc32c:
                    return now
                raise
            if blob.crc32c != entry.crc32c or blob.size != entry.size:
                # Never leave a wrong object behind: a later run would refuse to
                # replace it in no-clobber mode.
                with contextlib.suppress(api.NotFound, api.PreconditionFailed):
                    blob.delete(if_generation_match=blob.generation, retry=None)
                state["if_generation_match"] = 0
                raise _Corrupt(
                    f"CRC32C mismatch after copy: source {entry.crc32c}, "
                    f"destination {blob.crc32c} ({blob.size} bytes)"
                )
            return blob

        try:
            self._retrying(attempt, f"writing {self._dst_url(entry)}")
        except api.PreconditionFailed:
            if self.no_clobber:
                return "refused", "written by someone else during the copy, no-clobber"
            return "failed", "changed by someone else during the copy"
        except api.NotFound as exc:
            if not bucket.exists(retry=None):
                raise _Fatal(f"bucket not found: gs://{self.dst.bucket}") from exc
            # The pinned source generation is gone: overwritten or deleted meanwhile.
            return "failed", f"source changed or deleted during the copy ({_one_line(exc)})"
        except FileNotFoundError:
            return "failed", f"source deleted during the copy: {self._src_url(entry)}"
        return "copied", ""

    def _rewrite(self, blob: storage.Blob, entry: _Entry, if_generation_match: int) -> None:
        # The source generation is pinned (entry.blob carries it), so a source
        # overwritten meanwhile fails with 404 instead of copying other content.
        # fake-gcs-server ignores if_generation_match on rewrite (measured);
        # production GCS enforces it, so there a checkpoint written between our
        # listing and this call is not overwritten (412) even in the race window
        # that the emulator leaves open.
        token = None
        while True:
            token, _done, _total = blob.rewrite(
                entry.blob, token=token, if_generation_match=if_generation_match, retry=None
            )
            if token is None:
                return

    # -- downloading to local disk ----------------------------------------------------

    def _download(self, entry: _Entry, tmp: _TempFile) -> str:
        """Downloads the pinned generation into ``tmp``; returns the CRC32C written."""
        from google.cloud.storage import transfer_manager

        if entry.size >= self.sliced_threshold:
            tmp.close_for_external_writer()
            # It checks the combined CRC32C of the bytes it wrote against the
            # listed one (entry.blob.crc32c, i.e. entry.crc32c) and raises
            # DataCorruption on a mismatch (transfer_manager.py,
            # google-cloud-storage 3.17.1: _ChecksummingSparseFileWrapper.write
            # checksums each chunk as written, download_chunks_concurrently
            # compares). Reading the file back would only check that again.
            transfer_manager.download_chunks_concurrently(
                entry.blob,
                tmp.path,
                chunk_size=SLICED_DOWNLOAD_CHUNK,
                download_kwargs={"raw_download": True, "retry": None},
                worker_type=transfer_manager.THREAD,
                max_workers=min(8, self.workers),
                crc32c_checksum=True,
            )
            return entry.blob.crc32c
        # A Blob made from name and generation, not the listed one: fake-gcs-server
        # lists a mediaLink to itself although _LIST_FIELDS leaves it out (real GCS
        # does), which would send the download past the client's endpoint (a proxy
        # in tests and bench/copy.py); a Blob without one uses the endpoint.
        blob = entry.blob.bucket.blob(entry.blob.name, generation=entry.blob.generation)
        # raw_download: the stored bytes, never gzip-decoded, so the CRC32C applies.
        # checksum=None: the writer computes the CRC32C of what reaches the file.
        blob.download_to_file(
            tmp,
            raw_download=True,
            checksum=None,
            retry=None,
            single_shot_download=entry.size <= SINGLE_SHOT_MAX,
        )
        return tmp.crc32c()
