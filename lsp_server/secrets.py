"""Keep credentials out of every message, log line and exception text the server produces.

An endpoint's error body may echo the request's headers (some proxies and debug servers do), so any text
that came from the network, and every line the server logs or sends to the client, passes through `redact`:
- the literal value of every secret the process holds (`remember` is called when an API key is read),
- whatever follows an `Authorization` header name or a `Bearer`/`Basic` scheme word, whoever sent it.

`RedactingFormatter` applies it to each formatted log record, traceback included.
"""

from __future__ import annotations

import logging
import re
import threading

REDACTED = "<redacted>"
_MIN_SECRET = 4  # shorter values would blank out ordinary words

_lock = threading.Lock()
_secrets: set[str] = set()

# `Authorization: Bearer abc`, `"authorization": "abc"`, `Authorization=abc`: the value up to a quote, line
# end or separator. Then a bare `Bearer abc` / `Basic abc` anywhere (e.g. a header echoed without its name).
_AUTH_VALUE = re.compile(
    r"""(?i)(\\?["']?(?:proxy-)?authorization\\?["']?\s*[:=]\s*\\?["']?)(?:(?:bearer|basic|token)\s+)?[^\s"'\\,;}\]]+"""
)
_SCHEME_VALUE = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{4,}")


def remember(secret: str | None) -> None:
    """Hide `secret` in everything `redact` sees from now on."""
    if secret and len(secret) >= _MIN_SECRET:
        with _lock:
            _secrets.add(secret)


def redact(text: str) -> str:
    """`text` with every remembered secret and every authorization value replaced by <redacted>."""
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = _AUTH_VALUE.sub(lambda m: m.group(1) + REDACTED, text)
    return _SCHEME_VALUE.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)


class RedactingFormatter(logging.Formatter):
    """A log formatter whose output (message, arguments and traceback) never holds a secret."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))
