"""The server reports its own peak memory in `specls/stats`."""

from __future__ import annotations

from lsp_server.handlers.feedback import peak_rss_mb


def test_peak_rss_grows_with_what_the_process_holds() -> None:
    before = peak_rss_mb()
    assert before is not None and before > 1
    ballast = bytearray(64 * 1024 * 1024)
    ballast[::4096] = b"\x01" * len(ballast[::4096])  # touch every page so it is resident
    after = peak_rss_mb()
    assert after is not None and after >= before + 32
    del ballast
