"""Completion context: FIM prompts, snippets, completion mode, stop rules and the syntax context classifier.

Pure functions over the document store, the same for every backend. The scheduler hands
`build_completion_context` (the prompt, mode and stop rules for a cursor) and `finalize_completion` (the stop
rules on the finished text) to the engine worker; the benchmarks build their prompts with the same two, and
`specls bench draft-length` labels each draft with `syntax_context_of` (`syntax_context.py`).
"""

from lsp_server.context.builder import (
    CompletionContext,
    ContextSettings,
    build_completion_context,
    finalize_completion,
    full_prompt_tokens,
)
from lsp_server.context.fim import FimTemplate, Snippet, detect_fim_template
from lsp_server.context.syntax_context import syntax_classifier, syntax_context_of

__all__ = [
    "CompletionContext",
    "ContextSettings",
    "FimTemplate",
    "Snippet",
    "build_completion_context",
    "detect_fim_template",
    "finalize_completion",
    "full_prompt_tokens",
    "syntax_classifier",
    "syntax_context_of",
]
