"""`SpeclsServer`: what every handler shares (the settings, the document store, the scheduler) and the
messages the server sends on its own (log lines, load progress, `specls/status`). The handlers live in
`handlers/`; `server.py` wires them to their LSP methods."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from engine.api import CompletionBackend
from lsp_server import __version__
from lsp_server.backends import create_backend
from lsp_server.config import ServerSettings, SettingsReport, apply_settings, fit_to_model
from lsp_server.documents import DocumentStore
from lsp_server.jobs import Generation
from lsp_server.protocol import GROWN_NOTIFICATION, SpeclsProtocol
from lsp_server.scheduling import BackendState, Scheduler
from lsp_server.scheduling.budget import first_line_fit
from lsp_server.secrets import redact

logger = logging.getLogger(__name__)

STATUS_NOTIFICATION = "specls/status"
STATUS_INTERVAL_S = 0.5  # at most two status notifications per second after completions
_LOG_LEVELS = {
    logging.ERROR: types.MessageType.Error,
    logging.WARNING: types.MessageType.Warning,
    logging.INFO: types.MessageType.Info,
}


class SpeclsServer(LanguageServer):
    def __init__(
        self,
        cli_settings: Mapping[str, Any] | None = None,
        backend_factory: Callable[[ServerSettings], CompletionBackend] = create_backend,
    ) -> None:
        super().__init__("specls", __version__, protocol_cls=SpeclsProtocol)
        self.cli_settings = dict(cli_settings or {})  # applied last: the command line wins
        self.client_settings: dict[str, Any] = {}
        self.settings, report = self.resolve_settings()
        self.pending_report = report
        self.store = DocumentStore()
        self.scheduler = Scheduler(
            self.store,
            self.settings,
            backend_factory,
            on_state=self.on_backend_state,
            on_log=self.log,
            on_completion=self.schedule_status,
            on_grown=self.suggestion_grown,
        )
        self.progress_token: str | None = None
        self.progress_count = 0
        self.reload_task: asyncio.Future[None] | None = None  # held so the task is not collected mid-way
        self.accepted_ids: set[str] = set()
        self._last_status = 0.0
        self._status_pending = False

    # --- settings ---

    def resolve_settings(self) -> tuple[ServerSettings, SettingsReport]:
        settings, report = apply_settings(self.client_settings, ServerSettings())
        settings, cli_report = apply_settings(self.cli_settings, settings)
        report.invalid += cli_report.invalid
        report.unknown += cli_report.unknown
        return settings, report

    def fit_settings_to_model(self) -> None:
        """Clamp the settings to the loaded model's window (and say so) once it is known."""
        info = self.scheduler.info
        if info is None:
            return
        self.settings, problems = fit_to_model(self.settings, info.context_length)
        self.scheduler.update_settings(self.settings)
        self.report_settings(SettingsReport(invalid=problems))

    def log_model_fit(self) -> None:
        """Say why this model runs and whether its measured costs fit the keystroke budget (a warning when
        not: a smaller model, or a draft model, would answer sooner)."""
        info = self.scheduler.info
        if info is None:
            return
        if info.model_choice:
            self.log(logging.INFO, f"model {info.target}: {info.model_choice}")
        fits, detail = first_line_fit(info, self.settings.drafter)
        if fits is not None:
            self.log(logging.INFO if fits else logging.WARNING, f"keystroke budget: {detail}")

    def report_settings(self, report: SettingsReport) -> None:
        for problem in report.invalid:
            self.window_show_message(types.ShowMessageParams(types.MessageType.Warning, f"specls: {problem}"))
            self.log(logging.WARNING, problem)
        for note in report.unknown:
            self.log(logging.INFO, note)

    # --- messages to the client ---

    def log(self, level: int, message: str) -> None:
        message = redact(message)  # it may quote an endpoint's answer
        logger.log(level, message)
        try:
            self.window_log_message(
                types.LogMessageParams(_LOG_LEVELS.get(level, types.MessageType.Log), message)
            )
        except Exception:  # the client is gone; the local log has it
            logger.debug("could not send a log message", exc_info=True)

    def suggestion_grown(self, generation: Generation) -> None:
        """Tell the client that a suggestion it got only part of is now whole."""
        try:
            self.protocol.notify(
                GROWN_NOTIFICATION, {"uri": generation.uri, "suggestionId": str(generation.id)}
            )
        except Exception:  # the client is gone
            logger.debug("could not send %s", GROWN_NOTIFICATION, exc_info=True)

    def on_backend_state(self, state: BackendState, message: str) -> None:
        message = redact(message)
        if state == "error":
            self.log(logging.ERROR, message)
            self.window_show_message(types.ShowMessageParams(types.MessageType.Error, f"specls: {message}"))
        elif state == "ready":
            self.log(logging.INFO, message)
            self.log_model_fit()
            self.fit_settings_to_model()
        if state != "loading" and self.progress_token is not None:
            self.work_done_progress.end(self.progress_token, types.WorkDoneProgressEnd(message=message))
            self.progress_token = None
        self.send_status(message)

    def send_status(self, message: str = "") -> None:
        stats = self.scheduler.stats
        info = self.scheduler.info
        self._last_status = time.monotonic()
        self.protocol.notify(
            STATUS_NOTIFICATION,
            {
                "state": self.scheduler.state,
                "message": message,
                "model": info.target if info is not None else None,
                "lastLatencyMs": round(stats.latencies_ms[-1], 2) if stats.latencies_ms else None,
                "acceptanceRate": stats.acceptance_rate(),
                # The editors show these: "generating", and the share of the last warmed prompt cached.
                "generating": self.scheduler.generating,
                "lastError": stats.last_error,
                "warmCached": (
                    round(stats.warm_cached[0] / stats.warm_cached[1], 3)
                    if stats.warm_cached and stats.warm_cached[1]
                    else None
                ),
            },
        )

    def schedule_status(self) -> None:
        """Send a status after a completion, at most every STATUS_INTERVAL_S (the last one always arrives)."""
        wait = self._last_status + STATUS_INTERVAL_S - time.monotonic()
        if wait <= 0:
            self.send_status()
        elif not self._status_pending:
            self._status_pending = True

            def send_later() -> None:
                self._status_pending = False
                self.send_status()

            asyncio.get_running_loop().call_later(wait, send_later)
