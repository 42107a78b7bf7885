"""Where a run's files live, and the Cloud Storage client that reaches them.

Local paths (a /gcs/ FUSE mount included) or gs:// URLs: the rules every flag and
input naming a folder is checked by, and one client for real GCS or fake-gcs-server.
The trainer and the copier both use this module, and it imports neither.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from google.cloud import storage


class StorageError(Exception):
    """No client can be made: one line saying why (credentials, the emulator's URL)."""


def is_local(path: str) -> bool:
    """A path of this machine (incl. a /gcs/ FUSE mount), not a URL like gs://."""
    return "://" not in path


# Bucket names: 3-63 characters (up to 222 with dots) of a-z, 0-9, -, _ and .,
# starting and ending with a letter or digit
# (https://cloud.google.com/storage/docs/buckets#naming).
GCS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")


def url_problem(path: str) -> str | None:
    """What is wrong with ``path`` as a dir URL, or ``None`` (local paths always pass).

    TensorFlow's file system knows gs:// (and a /gcs/ FUSE mount is a local path);
    an empty or malformed bucket would otherwise become a local folder named "gs:".
    """
    if not path or is_local(path):
        return None
    scheme, _, rest = path.partition("://")
    if scheme != "gs":
        return "only local paths, /gcs/ mounts and gs://bucket/... URLs are supported"
    bucket = rest.split("/", 1)[0]
    if not GCS_BUCKET.match(bucket):
        return f"{bucket!r} is not a Cloud Storage bucket name"
    return None


def folder_problem(path: str) -> str | None:
    """Why a local folder cannot be created at ``path`` (a file in the way), or ``None``."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{existing!r} is a file, not a folder"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


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
        StorageError: no Google Cloud credentials, or a bad ``STORAGE_EMULATOR_HOST``.
    """
    from google.auth import exceptions as auth
    from google.cloud import storage

    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        from urllib.parse import urlsplit

        # "Despite name, includes scheme." (google-cloud-storage 3.x _helpers.py:49)

        parts = urlsplit(emulator)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise StorageError(
                f"STORAGE_EMULATOR_HOST {emulator!r} is not a URL like http://127.0.0.1:4443"
            )
        from google.auth.credentials import AnonymousCredentials

        project = os.environ.get("GOOGLE_CLOUD_PROJECT", "test")
        client = storage.Client(project=project, credentials=AnonymousCredentials())
    else:
        try:
            client = storage.Client()
        except auth.DefaultCredentialsError as exc:
            raise StorageError(f"no Google Cloud credentials: {_first_line(exc)}") from exc
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
