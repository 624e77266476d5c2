"""Completion context: FIM prompts, snippets, completion mode, stop rules and the syntax context classifier.

Pure functions over the document store; the server and the remote backend call `build_completion_context`
and `finalize_completion`, the benchmark uses `syntax_context_of` and `prefix_reuse_rate`.
"""

from lsp_server.context.builder import (
    CompletionContext,
    ContextSettings,
    build_completion_context,
    finalize_completion,
)
from lsp_server.context.fim import FimTemplate, Snippet, detect_fim_template, prefix_reuse_rate
from lsp_server.context.syntax_context import syntax_classifier, syntax_context_of

__all__ = [
    "CompletionContext",
    "ContextSettings",
    "FimTemplate",
    "Snippet",
    "build_completion_context",
    "detect_fim_template",
    "finalize_completion",
    "prefix_reuse_rate",
    "syntax_classifier",
    "syntax_context_of",
]
