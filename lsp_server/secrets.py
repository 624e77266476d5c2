"""Keep credentials out of every message, log line and exception text the server produces.

An endpoint's error body may echo the request's headers (some proxies and debug servers do), so any text
that came from the network, and every line the server logs or sends to the client, passes through `redact`:
- every remembered secret (`remember` is called when an API key is read), in every form a body, a log or a
  JSON encoder may write it: as it is, JSON-escaped (`\\n`, `\\"`, `\\uXXXX`), with `/` escaped as `\\/`
  (PHP's default), URL-encoded, Python's `repr`, and those escaped once more (a JSON string inside JSON);
  and any run of at least FRAGMENT characters of one of those forms (a key cut short, or split at an
  escape), widened to all of the key that is there;
- whatever follows an `Authorization` header name or a `Bearer`/`Basic` scheme word, whoever sent it.

`RedactingFormatter` applies it to each formatted log record, traceback included; `SpeclsProtocol` applies
`redact_secrets` (the first part only: it never changes text that holds no key) to every message it sends,
so logMessage, showMessage, `specls/status`, `specls/stats` and responses pass through one place.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import urllib.parse

REDACTED = "<redacted>"
_MIN_SECRET = 4  # shorter values would blank out ordinary words
FRAGMENT = 10  # runs of a key this long or longer are hidden too
_MIN_FRAGMENTED = 16  # keys shorter than this are hidden whole only (a fragment could be an ordinary word)

_lock = threading.Lock()
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None
_forms: dict[str, list[tuple[str, int]]] = {}  # each literal the pattern finds -> (form, where it starts)

# `Authorization: Bearer abc`, `"authorization": "abc"`, `Authorization=abc`: the value up to a quote, line
# end or separator. Then a bare `Bearer abc` / `Basic abc` anywhere (e.g. a header echoed without its name).
_AUTH_VALUE = re.compile(
    r"""(?i)(\\?["']?(?:proxy-)?authorization\\?["']?\s*[:=]\s*\\?["']?)(?:(?:bearer|basic|token)\s+)?[^\s"'\\,;}\]]+"""
)
_SCHEME_VALUE = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{4,}")


def _escaped(text: str) -> set[str]:
    """The ways `text` may be written by an encoder."""
    json_ascii = json.dumps(text)[1:-1]
    json_utf8 = json.dumps(text, ensure_ascii=False)[1:-1]
    return {
        text,
        json_ascii,
        json_utf8,
        json_ascii.replace("/", "\\/"),
        json_utf8.replace("/", "\\/"),
        urllib.parse.quote(text, safe=""),
        urllib.parse.quote_plus(text, safe=""),
        repr(text)[1:-1],
        repr(text.encode("utf-8"))[2:-1],
    }


def forms_of(secret: str) -> set[str]:
    """Every form of `secret` that `redact_secrets` hides: escaped once or twice (a JSON string in JSON)."""
    forms: set[str] = set()
    for once in _escaped(secret):
        forms |= _escaped(once)
    return {form for form in forms if len(form) >= _MIN_SECRET}


def remember(secret: str | None) -> None:
    """Hide `secret` (and its surrounding-whitespace-free form) in everything `redact` sees from now on."""
    global _pattern
    values = {value for value in (secret, secret.strip() if secret else None) if value}
    values = {value for value in values if len(value) >= _MIN_SECRET}
    if not values:
        return
    with _lock:
        if values <= _secrets:
            return
        _secrets.update(values)
        literals: dict[str, list[tuple[str, int]]] = {}
        for value in _secrets:
            for form in forms_of(value):
                literals.setdefault(form, []).append((form, 0))
                if len(value.strip()) >= _MIN_FRAGMENTED:
                    for start in range(len(form) - FRAGMENT + 1):
                        literals.setdefault(form[start : start + FRAGMENT], []).append((form, start))
        ordered = sorted(literals, key=len, reverse=True)  # a whole form before any fragment of it
        _forms.clear()
        _forms.update(literals)
        _pattern = re.compile("|".join(re.escape(literal) for literal in ordered))


def normalise_key(value: str | None, source: str) -> tuple[str | None, str]:
    """An API key as it can be sent, and a note when it had to be changed: surrounding whitespace (a secret
    written with `echo`, a Windows `.env`'s carriage return) is stripped. ValueError, with a message that
    names `source` but never the key, when what is left cannot go into an HTTP header."""
    if value is None:
        return None, ""
    remember(value)
    key = value.strip()
    if not key:
        return None, f"{source} holds only whitespace; no API key is sent"
    for position, char in enumerate(key):
        if not " " < char < "\x7f":
            raise ValueError(
                f"the API key in {source} has a space, control or non-ASCII character at position {position}, "
                "which an HTTP header cannot carry; fix the key"
            )
    if key == value:
        return key, ""
    what = ", ".join(
        name
        for name, found in (
            ("a newline", "\n" in value),
            ("a carriage return", "\r" in value),
            ("spaces or tabs", " " in value or "\t" in value),
        )
        if found
    )
    return key, f"the API key in {source} had surrounding whitespace ({what or 'other'}); it was removed"


def redact_secrets(text: str) -> str:
    """`text` with every remembered secret, in any of its forms or a long enough run of one, replaced."""
    with _lock:
        pattern, forms = _pattern, _forms
    if pattern is None:
        return text
    pieces: list[str] = []
    at = 0
    while (match := pattern.search(text, at)) is not None:
        start, end = match.span()
        for form, offset in forms.get(match.group(), ()):  # widen to all of the form that is there
            left, right = start, end
            while (
                left > at
                and offset - (start - left) > 0
                and text[left - 1] == form[offset - (start - left) - 1]
            ):
                left -= 1
            while (
                right < len(text)
                and offset + (right - start) < len(form)
                and text[right] == form[offset + (right - start)]
            ):
                right += 1
            start, end = min(start, left), max(end, right)
        pieces.append(text[at:start])
        pieces.append(REDACTED)
        at = end
    pieces.append(text[at:])
    return "".join(pieces)


def redact(text: str) -> str:
    """`text` with every remembered secret and every authorization value replaced by <redacted>."""
    text = redact_secrets(text)
    text = _AUTH_VALUE.sub(lambda m: m.group(1) + REDACTED, text)
    return _SCHEME_VALUE.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)


class RedactingFormatter(logging.Formatter):
    """A log formatter whose output (message, arguments and traceback) never holds a secret."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))
