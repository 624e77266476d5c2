"""A completion context and the server's settings, turned into the engine's request.

Beside the engine worker that sends it, not in `context/`: it reads the server's settings (`config.py`), and
`config.py` reads the context package's settings, so inside `context/` it would close a loop between folders.
"""

from __future__ import annotations

import re

from engine.api import CompletionRequest
from lsp_server.config import ServerSettings
from lsp_server.context import CompletionContext

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def without_lone_surrogates(text: str) -> str:
    """`text` with each lone surrogate (valid in LSP's JSON, not in UTF-8) as U+FFFD, the same length in
    characters and UTF-8 bytes; a tokenizer refuses the whole string otherwise, and one bad character in a
    document would break every prompt that quotes it."""
    return text if text.isascii() else _LONE_SURROGATE.sub("\ufffd", text)


def engine_request(
    ctx: CompletionContext,
    settings: ServerSettings,
    *,
    previous_completion: str,
) -> CompletionRequest:
    """The request for one completion at the cursor `ctx` describes; `previous_completion` is the suggestion
    this one replaces (the stale drafter re-verifies it)."""
    clean = without_lone_surrogates
    return CompletionRequest(
        prompt=clean(ctx.prompt),
        max_new_tokens=settings.max_new_tokens,
        temperature=settings.temperature,
        stop_strings=ctx.stop_strings,
        lookup_context=tuple(clean(snippet) for snippet in ctx.lookup_snippets),
        suffix=clean(ctx.suffix),
        previous_completion=clean(previous_completion),
        drafter=settings.drafter,
        stop_check=ctx.stop_check,
        forced_prefix=clean(ctx.forced_prefix),
        blank_line=ctx.blank_line,
        import_names=ctx.import_names,
    )
