"""The scheduler's old import path, kept for the tests and callers that use it: the scheduler is the
`lsp_server.scheduling` package (`coordinator.py` over pure policies)."""

from lsp_server.scheduling import PREFETCH_MAX_CHARS, BackendState, Scheduler, Suggestion

__all__ = ["PREFETCH_MAX_CHARS", "BackendState", "Scheduler", "Suggestion"]
