"""What the import-steering tests share: a backend that says it speaks Qwen's FIM, and the context the builder
makes at a marked cursor of a file opened in a workspace folder."""

from __future__ import annotations

from pathlib import Path

from engine.api import BackendInfo
from lsp_server.context import CompletionContext, build_completion_context
from lsp_server.context.builder import ContextSettings
from lsp_server.context.fim import QWEN_CODER
from lsp_server.context.workspace import WorkspaceFiles
from lsp_server.documents import DocumentStore

QWEN_TOKENS = (QWEN_CODER.prefix_token, QWEN_CODER.suffix_token, QWEN_CODER.middle_token, QWEN_CODER.file_sep)
QWEN = BackendInfo("fake", "t", None, QWEN_TOKENS, 32768, "cpu")


def context_at(
    path: Path, root: Path | None, marked: str, settings: ContextSettings | None = None
) -> CompletionContext:
    """The context at `<>` in `marked`, the file opened at `path` with the workspace folder `root` (none: no
    workspace)."""
    store = DocumentStore()
    if root is not None:
        store.workspace = WorkspaceFiles([root])
    store.open(path.as_uri(), "python", 1, marked.replace("<>", ""))
    return build_completion_context(
        store,
        path.as_uri(),
        marked.index("<>"),
        QWEN,
        settings or ContextSettings(),
        lambda text: len(text) // 4 + 1,
    )
