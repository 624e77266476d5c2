"""Backends: whatever produces completions behind `engine.api.CompletionBackend`.

`create_backend` blocks while the model loads; the server calls it on its engine worker thread. Imports are
lazy so that `specls serve --backend fake` never imports torch.
"""

from __future__ import annotations

from engine.api import CompletionBackend
from lsp_server.config import ServerSettings


def local_target(settings: ServerSettings) -> str | None:
    """The named target; with none named, the default catalog model when pulled (else the bundled pair). A
    draft named without a target keeps the bundled target it was trained for."""
    return local_target_choice(settings)[0]


def local_target_choice(settings: ServerSettings) -> tuple[str | None, str]:
    """`local_target` and why (`engine.catalog.default_target_choice` when the settings name no model)."""
    if settings.target is not None:
        return settings.target, "named by the `target` setting (or --target)"
    if settings.draft is not None:
        return None, "a draft is named without a target: the bundled target it was trained for"
    from engine.catalog import default_target_choice

    cuda = settings.device.startswith("cuda") or (settings.device == "auto" and _cuda_available())
    return default_target_choice("cuda" if cuda else "cpu")


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


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

        target, why = local_target_choice(settings)
        local: CompletionBackend = LocalEngine(
            target=target,
            draft=settings.draft,
            device=settings.device,
            dtype=settings.dtype,
            runtime=settings.runtime,
            quantization=settings.quantize,
            model_choice=why,
        )
        return local
    raise ValueError(f"unknown backend {settings.backend!r}")
