"""What an OpenAI-compatible server is serving: its model, context size and FIM tokens, and how many
characters its tokenizer puts in a token (so that counting tokens needs no round trip per keystroke).

Asks `/v1/models` (vLLM's `max_model_len`, llama-server's `n_ctx_train`), llama-server's `/props` (the
context actually allocated per slot) and `/tokenize` (which FIM tokens stay one token; a calibration text).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from engine.api import BackendInfo
from lsp_server.backends.http_stream import RemoteError, StreamingTransport
from lsp_server.context.fim import FIM_FAMILIES

log = logging.getLogger(__name__)

# Code-like text whose server-side token count calibrates the local estimate used by `count_tokens`.
CALIBRATION_TEXT = (
    "def parse_config(path: str) -> dict[str, int]:\n"
    '    """Read KEY=VALUE lines, skipping comments."""\n'
    "    result = {}\n"
    "    with open(path, encoding='utf-8') as handle:\n"
    "        for line in handle:\n"
    "            if line.startswith('#') or '=' not in line:\n"
    "                continue\n"
    "            key, value = line.split('=', 1)\n"
    "            result[key.strip()] = int(value)\n"
    "    return result\n"
)
DEFAULT_CHARS_PER_TOKEN = 3.0  # a cautious guess for code until calibrated
_ESTIMATE_MARGIN = 1.1  # over-count a little: a prompt a bit short beats one past the server's context


def fim_token_candidates() -> tuple[str, ...]:
    """Special-token strings of the FIM families the context builder knows. A server exposes no list of its
    special tokens, so the backend asks /tokenize which of these the served tokenizer keeps as one token."""
    seen: dict[str, None] = {}
    for family in FIM_FAMILIES:
        for token in (family.prefix_token, family.suffix_token, family.middle_token, family.file_sep):
            if token:
                seen[token] = None
        for stop in family.stop_strings:
            seen[stop] = None
    return tuple(seen)


def estimate_tokens(text: str, chars_per_token: float) -> int:
    """A local token count calibrated against the server's tokenizer, erring high."""
    if not text:
        return 0
    return math.ceil(len(text) / chars_per_token * _ESTIMATE_MARGIN)


@dataclass(frozen=True)
class ServerFacts:
    info: BackendInfo
    model: str | None  # the model to name in requests (None: the server's default)
    chars_per_token: float


def fallback_info(model: str | None, special_tokens: tuple[str, ...] | None, where: str) -> BackendInfo:
    """What the backend reports before the server has answered."""
    return BackendInfo(
        name="openai",
        target=model or "(server default)",
        draft=None,
        special_tokens=special_tokens or (),
        context_length=2048,
        device=where,
    )


def probe_server(
    transport: StreamingTransport,
    model: str | None,
    special_tokens: tuple[str, ...] | None,
    context_length: int,
) -> ServerFacts:
    """Ask the server about itself. `special_tokens` None means find out which FIM tokens it has;
    `context_length` is kept when the server does not say. Raises when the server cannot be reached."""
    chars_per_token = DEFAULT_CHARS_PER_TOKEN
    try:
        models = transport.get_json("GET", "/v1/models").get("data") or []
    except RemoteError as exc:  # it answered, so it is up; the completion call will say what is wrong
        log.warning("could not list the server's models: %s", exc)
        models = []
    if models:
        entry = next((m for m in models if m.get("id") == model), models[0])
        model = model or entry.get("id")
        if isinstance(entry.get("max_model_len"), int):  # vLLM
            context_length = entry["max_model_len"]
        meta = entry.get("meta") or {}
        if isinstance(meta.get("n_ctx_train"), int):  # llama-server
            context_length = meta["n_ctx_train"]
    try:  # llama-server: the context actually allocated per slot
        props = transport.get_json("GET", "/props")
        n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
        if isinstance(n_ctx, int) and n_ctx > 0:
            context_length = n_ctx
    except RemoteError:
        pass  # not llama-server
    special = special_tokens
    try:
        if special is None:
            special = tuple(t for t in fim_token_candidates() if len(_tokenize(transport, t, model)) == 1)
        calibration_tokens = len(_tokenize(transport, CALIBRATION_TEXT, model))
        chars_per_token = len(CALIBRATION_TEXT) / max(1, calibration_tokens)
    except RemoteError as exc:
        log.info("server has no usable /tokenize (%s); special tokens must be configured", exc)
    info = BackendInfo(
        name="openai",
        target=model or "(server default)",
        draft=None,
        special_tokens=tuple(special or ()),
        context_length=context_length,
        device=transport.endpoint.display,
    )
    log.info(
        "remote model %s at %s: context %d, special tokens %s",
        info.target,
        transport.endpoint.display,
        context_length,
        ", ".join(info.special_tokens) or "none",
    )
    return ServerFacts(info=info, model=model, chars_per_token=chars_per_token)


def _tokenize(transport: StreamingTransport, text: str, model: str | None) -> list[Any]:
    # llama-server reads "content" (+ parse_special), vLLM reads "prompt" (+ add_special_tokens).
    payload: dict[str, Any] = {
        "content": text,
        "prompt": text,
        "add_special": False,
        "add_special_tokens": False,
        "parse_special": True,
    }
    if model:
        payload["model"] = model
    tokens = transport.get_json("POST", "/tokenize", payload).get("tokens")
    if not isinstance(tokens, list):
        raise RemoteError("/tokenize returned no token list")
    return tokens
