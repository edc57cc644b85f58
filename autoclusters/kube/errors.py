"""A few named exceptions; API errors are translated once, here, at the client boundary."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager


class KubeError(Exception):
    """Any failed call to the API server."""

    def __init__(self, message: str, status: int | None = None, reason: str = "",
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after  # the answer's Retry-After, in seconds, where it had one


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    """A resourceVersion precondition failed or the object already exists."""


class Forbidden(KubeError):
    """RBAC or an admission policy said no; the message carries the server's reason."""


class Invalid(KubeError):
    pass


class TooManyRequests(KubeError):
    """HTTP 429: throttled, or an eviction a PodDisruptionBudget does not allow now."""


class Throttled(TooManyRequests):
    """HTTP 429 from the API server's flow control (API Priority and Fairness, or the
    max-in-flight limits), not from a resource: the request was refused before any handler
    read it, so nothing was done and sending it again after ``retry_after`` is safe. The
    client (``Kube.request``) does so a few times; a caller sees this only once those ran out.
    An eviction that a PodDisruptionBudget refuses is a plain :class:`TooManyRequests`: the
    eviction API answered it, with a Status object."""


class Unavailable(KubeError):
    """The API server could not be reached or answered 5xx."""


_BY_STATUS: dict[int, type[KubeError]] = {
    400: Invalid,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: Invalid,
    429: TooManyRequests,
}


# What the API server answers when a JSON patch does not apply to the object as it is now (a
# ``test`` that fails, a path that is gone): its generic 422, the patch library's own words
# dropped. Other 422s (field validation, an admission policy's refusal) say what was refused.
PATCH_DID_NOT_APPLY = "the server rejected our request due to an error in our request"


def lost_race(e: KubeError) -> bool:
    """Another writer got there first: a 409 (a stale resourceVersion, a name taken) or a JSON
    patch that no longer applies (its ``test`` failed: the API server's generic 422). Any other
    422 (an invalid field, an admission policy's refusal) and a 404 (the object was deleted)
    are not races: reading again and retrying would not help."""
    if isinstance(e, Conflict):
        return True
    text = str(e).lower()
    return isinstance(e, Invalid) and (PATCH_DID_NOT_APPLY in text or "testing value" in text
                                       or "test operation does not apply" in text)


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header's delay in seconds (the API server sends whole seconds); None
    for none, or for a form it does not send (an HTTP date)."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def from_status(status: int, reason: str, body: str | bytes | None, retry_after: str | None = None) -> KubeError:
    """The named error of an answer of ``status`` (300 or more) with ``body``: the one
    translation of both transports. A 429 whose body is no Status object is flow control's
    (:class:`Throttled`)."""
    msg = _message(body, reason or f"HTTP {status}")
    delay = retry_after_seconds(retry_after)
    if status == 429 and not _is_status_object(body):
        return Throttled(msg, status=status, reason=reason, retry_after=delay)
    cls = _BY_STATUS.get(status, Unavailable if status >= 500 or status == 0 else KubeError)
    return cls(msg, status=status, reason=reason, retry_after=delay)


def _is_status_object(body: str | bytes | None) -> bool:
    if not body:
        return False
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("kind") == "Status"


def _message(body: str | bytes | None, fallback: str) -> str:
    if not body:
        return fallback
    try:
        data = json.loads(body)
        return str(data.get("message") or fallback)
    except (ValueError, AttributeError):
        return str(body)[:500]


def translate(exc: BaseException) -> KubeError:
    """Map an exception of the kubernetes library (or urllib3) to one of ours."""
    from kubernetes.client.exceptions import ApiException  # only the client layer imports it

    if isinstance(exc, KubeError):
        return exc
    if isinstance(exc, ApiException):
        headers = exc.headers or {}
        retry_after = next((str(v) for k, v in headers.items() if str(k).lower() == "retry-after"), None)
        return from_status(exc.status or 0, exc.reason or "", exc.body, retry_after)
    return Unavailable(f"{type(exc).__name__}: {exc}")


@contextmanager
def translated() -> Iterator[None]:
    try:
        yield
    except KubeError:
        raise
    except Exception as e:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        if isinstance(e, ApiException | HTTPError | OSError):
            raise translate(e) from e
        raise
