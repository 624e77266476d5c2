"""A completion context and the server's settings, turned into the engine's request."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.api import CompletionRequest
from lsp_server.context.builder import CompletionContext

if TYPE_CHECKING:
    from lsp_server.config import ServerSettings


def engine_request(
    ctx: CompletionContext,
    settings: ServerSettings,
    *,
    previous_completion: str,
) -> CompletionRequest:
    """The request for one completion at the cursor `ctx` describes; `previous_completion` is the suggestion
    this one replaces (the stale drafter re-verifies it)."""
    return CompletionRequest(
        prompt=ctx.prompt,
        max_new_tokens=settings.max_new_tokens,
        temperature=settings.temperature,
        stop_strings=ctx.stop_strings,
        lookup_context=ctx.lookup_snippets,
        suffix=ctx.suffix,
        previous_completion=previous_completion,
        drafter=settings.drafter,
        stop_check=ctx.stop_check,
        forced_prefix=ctx.forced_prefix,
    )
