"""The one redaction of what the controller writes out: every URL and every piece of a hook's
or a provider script's output passes through ``redact`` before it goes into an event, a
condition, a log line or a Remediation record.

What it hides:

- in every URL in the text: the user information (``https://user:pass@host`` becomes
  ``https://***@host``), the value of every query parameter (``?token=abc&sig=x`` becomes
  ``?token=***&sig=***``: a signed URL's signature and an API key look alike, so no value is
  kept) and the fragment. Scheme, host, port and path stay, so the operator can still tell
  which endpoint it was; a secret carried in the path itself (some chat webhooks) is not
  recognisable as one and stays, so such URLs belong in the controller's settings, not in
  messages of their own;
- outside URLs: the value after a credential-like key (``token=``, ``password:``,
  ``api_key=``, ``secret=``, ``sig=``, ...) and the credentials of an ``Authorization``
  scheme (``Bearer abc``, ``Basic abc``).

The text is also cut to ``limit`` characters, and the cut is said in the text.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

MASK = "***"

_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>`]+")
_SECRET_KEYS = (r"access[_-]?token|refresh[_-]?token|id[_-]?token|token|password|passwd|pwd|secret|client[_-]?secret"
                r"|api[_-]?key|apikey|private[_-]?key|sig|signature|credentials?|session[_-]?id|auth")
# key=value / key: value / "key": "value", the key standing alone (not the tail of a longer word)
_KEY_VALUE = re.compile(rf"(?i)(?<![A-Za-z0-9_-])(\"?(?:{_SECRET_KEYS})\"?\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&]+)")
# an Authorization header's credentials: a word with a digit, a capital or a token character
# (so "basic authentication" stays words)
_AUTH_SCHEME = re.compile(r"\b((?i:bearer|basic))\s+(?=\S*[0-9A-Z._~+/=-])([A-Za-z0-9._~+/=-]{6,})")


def redact_url(url: str) -> str:
    """One URL without its user information, query values and fragment."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a port that is not a number
    except ValueError:
        return MASK  # not a URL we can take apart: nothing of it is shown
    netloc = parts.netloc
    if "@" in netloc:
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"  # an IPv6 literal keeps its brackets
        netloc = f"{MASK}@{host}" + (f":{port}" if port is not None else "")
    query = "&".join(f"{pair.split('=', 1)[0]}={MASK}" if pair else pair for pair in parts.query.split("&")) \
        if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, MASK if parts.fragment else ""))


def redact(text: str, limit: int | None = None, *, keep_start: bool = False) -> str:
    """``text`` with every URL redacted (``redact_url``), credential-like values masked, and cut
    to ``limit`` characters (None: not cut), the cut said in the text: the last ones (a
    program's last words say why it failed), or with ``keep_start`` the first (an HTTP error
    body says it first)."""
    out = _URL.sub(lambda m: redact_url(m.group(0)), text)
    out = _KEY_VALUE.sub(lambda m: m.group(1) + MASK, out)
    out = _AUTH_SCHEME.sub(lambda m: f"{m.group(1)} {MASK}", out)
    if limit is not None and len(out) > limit:
        if keep_start:
            out = f"{out[:limit]} [cut after the first {limit} characters]"
        else:
            out = f"[cut to the last {limit} characters] {out[len(out) - limit:]}"
    return out
