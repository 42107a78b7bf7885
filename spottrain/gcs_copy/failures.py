"""What went wrong with a request: worth retrying, fatal for the whole copy, or neither."""

from __future__ import annotations

import http.client

_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception's text, shortened (server errors are long)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Corrupt(Exception):
    """A transferred file whose CRC32C differs from the source's."""


class _Fatal(Exception):
    """An error that stops the whole copy (permission, vanished bucket)."""


def _is_transient(exc: BaseException) -> bool:
    """Whether retrying the same request may succeed."""
    import requests
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth
    from google.cloud.storage import exceptions as gcs

    if isinstance(exc, api.GoogleAPICallError):
        return exc.code in _TRANSIENT_STATUS
    if isinstance(exc, gcs.InvalidResponse):
        return getattr(exc.response, "status_code", None) in _TRANSIENT_STATUS
    if isinstance(exc, auth.TransportError):
        return True
    return isinstance(
        exc,
        (
            _Corrupt,
            gcs.DataCorruption,
            ConnectionError,  # includes ConnectionResetError, BrokenPipeError
            TimeoutError,
            requests.ConnectionError,
            requests.Timeout,
            requests.exceptions.ChunkedEncodingError,
            http.client.HTTPException,
        ),
    )


def _is_permission(exc: BaseException) -> bool:
    from google.api_core import exceptions as api

    return isinstance(exc, (api.Forbidden, api.Unauthorized, PermissionError))
