"""`redact` hides remembered secrets and any authorization value, in any quoting a body may use."""

from __future__ import annotations

import logging

from lsp_server.backends.http_stream import RemoteError, Secret, error_detail
from lsp_server.secrets import REDACTED, RedactingFormatter, redact


def test_a_remembered_key_is_hidden_wherever_it_appears() -> None:
    Secret("sk-unit-abcdef123456")
    assert redact("key=sk-unit-abcdef123456!") == f"key={REDACTED}!"
    assert "sk-unit" not in str(RemoteError("server said sk-unit-abcdef123456"))
    assert "sk-unit" not in error_detail(b'{"error": {"message": "bad key sk-unit-abcdef123456"}}')


def test_authorization_values_are_hidden_whoever_sent_them() -> None:
    for text in (
        "Authorization: Bearer tok_9f8e7d6c5b",
        '{"Authorization": "Bearer tok_9f8e7d6c5b"}',
        "{'authorization': 'tok_9f8e7d6c5b'}",
        '{\\"Authorization\\": \\"Bearer tok_9f8e7d6c5b\\"}',
        "proxy-authorization=Basic tok_9f8e7d6c5b",
        "auth was Bearer tok_9f8e7d6c5b",
    ):
        assert "tok_9f8e7d6c5b" not in redact(text), text
    assert redact("a bearer of bad news") == "a bearer of bad news"  # words after 'bearer' stay
    assert redact("no secrets here: 401 Unauthorized") == "no secrets here: 401 Unauthorized"


def test_log_records_and_their_tracebacks_are_redacted() -> None:
    Secret("sk-unit-in-a-traceback")
    formatter = RedactingFormatter("%(message)s")
    try:
        raise ValueError("sk-unit-in-a-traceback")
    except ValueError:
        import sys

        record = logging.LogRecord(
            "x", logging.ERROR, "f", 1, "key %s", ("sk-unit-in-a-traceback",), sys.exc_info()
        )
    assert "sk-unit-in-a-traceback" not in formatter.format(record)
