"""Backends: whatever produces completions behind `engine.api.CompletionBackend`.

`create_backend` blocks while the model loads; the server calls it on its engine worker thread. Imports are
lazy so that `specls serve --backend fake` never imports torch.
"""

from __future__ import annotations

from engine.api import CompletionBackend
from lsp_server.config import ServerSettings


def create_backend(settings: ServerSettings) -> CompletionBackend:
    if settings.backend == "fake":
        from lsp_server.backends.fake import FakeBackend

        return FakeBackend.load(settings.fake)
    if settings.backend == "openai":
        from lsp_server.backends.openai import OpenAIBackend  # type: ignore[import-not-found,unused-ignore]

        backend: CompletionBackend = OpenAIBackend(settings)
        return backend
    if settings.backend == "local":
        from engine.service import LocalEngine  # type: ignore[import-not-found,unused-ignore]

        local: CompletionBackend = LocalEngine(
            target=settings.target, draft=settings.draft, device=settings.device, dtype=settings.dtype
        )
        return local
    raise ValueError(f"unknown backend {settings.backend!r}")
