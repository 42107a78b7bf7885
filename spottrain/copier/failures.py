"""What went wrong with a request: worth retrying, fatal for the whole copy, or neither."""

from __future__ import annotations


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception's text, shortened (server errors are long)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Corrupt(Exception):
    """A transferred file whose CRC32C differs from the source's."""


class _Fatal(Exception):
    """An error that stops the whole copy (permission, vanished bucket)."""


def _is_transient(exc: BaseException) -> bool:
    """Whether retrying the same request (or the whole file) may succeed.

    Which request errors are transient is the storage client's own decision:
    ``google.cloud.storage.retry.DEFAULT_RETRY``'s predicate (``_should_retry`` in
    google-cloud-storage 3.17.1 ``retry.py`` lines 31-72: 408, 429, 5xx, connection
    and protocol errors, timeouts, a transport error wrapping one of those). Only
    a corrupted transfer is added: the library raises ``DataCorruption`` but never
    retries it, while a fresh whole-file attempt can fix it.

    The retry loop itself stays ours (``planner._Copy._retrying``), around the
    whole file rather than each request, because a per-request ``Retry`` cannot
    (a) retry a CRC32C mismatch found after the last byte, which needs a new temp
    file or a delete of the bad object, nor (b) re-decide after a 412: the
    precondition failed either because our own lost-response attempt succeeded
    (then it is done) or because someone else wrote (then it is refused).
    """
    from google.cloud.storage import exceptions as gcs
    from google.cloud.storage.retry import DEFAULT_RETRY

    if isinstance(exc, (_Corrupt, gcs.DataCorruption)):
        return True
    try:
        return bool(DEFAULT_RETRY._predicate(exc))
    except AttributeError:  # e.g. an InvalidResponse without a response
        return False


def _is_permission(exc: BaseException) -> bool:
    from google.api_core import exceptions as api

    return isinstance(exc, (api.Forbidden, api.Unauthorized, PermissionError))
