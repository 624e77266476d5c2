"""Typed server settings with defaults.

Settings arrive as camelCase JSON (initializationOptions at top level, or under "specls" in
workspace/didChangeConfiguration). Every key is parsed on its own: a bad value falls back to the default and
becomes one line in the returned problem list, which the server shows to the user. Command-line flags are
applied last, so `specls serve --backend fake` wins over an editor's defaults.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from engine.api import DRAFTERS, QUANTIZATIONS, RUNTIMES
from lsp_server.context import ContextSettings
from lsp_server.context.builder import PROMPT_SHAPES

BACKENDS = ("local", "openai", "fake")
# auto: bf16 where the CPU computes it natively (engine.models.choose_dtype)
DTYPES = ("auto", "fp32", "bf16")


@dataclass(frozen=True)
class FakeSettings:
    """Knobs of the fake backend (tests and client development)."""

    token_delay_ms: float = 0.0  # sleep per generated token
    load_delay_ms: float = 0.0  # pretend the model takes this long to load
    # (trigger, continuation) pairs; see lsp_server.backends.fake.FakeBackend
    rules: tuple[tuple[str, str], ...] = ()
    fail_load: str | None = None  # when set, loading fails with this message


@dataclass(frozen=True)
class ServerSettings:
    backend: str = "local"
    target: str | None = None  # None = the default model if pulled, else bundled; a name, folder or hub id
    draft: str | None = None  # None = the target's default draft; "none" = no draft model
    device: str = "auto"
    dtype: str = "auto"
    runtime: str = "auto"  # what decodes the target (engine.runtime): llama.cpp when it can, else torch
    quantize: str = "auto"  # torch runtime: w8a8 without native bf16 (engine.hardware), int8/int4 weight-only
    endpoint: str | None = None  # remote backend base URL
    remote_model: str | None = None
    api_key_env: str = "SPECLS_API_KEY"  # name of the environment variable that holds the key
    max_new_tokens: int = 64
    temperature: float = 0.0
    drafter: str = "hybrid"
    debounce_ms: int = 0
    # Answer with the first line as soon as it is decoded (the rest is served from the generation) ...
    first_line_first: bool = False
    # ... or once a request has waited this long for a multi-line suggestion whose first line is ready.
    first_line_ms: int = 100
    # Mid-line, answer after this long with the text generated so far (the next key's request is served
    # from the generation as it grows); 0: wait for the first line.
    partial_after_ms: int = 80
    warm: bool = True  # prefill the cache while the user is idle (file opened, cursor moved, saved, a pause)
    warm_idle_ms: int = 300  # the pause after the last request before the idle warm-up
    prefetch: bool = True  # while a suggestion is on screen, compute the next one as if it were accepted
    context: ContextSettings = field(default_factory=ContextSettings)
    fake: FakeSettings = field(default_factory=FakeSettings)

    def model_key(self) -> tuple[Any, ...]:
        """The settings whose change means the backend must be reloaded."""
        return tuple(getattr(self, name) for name in MODEL_FIELDS)


# The ServerSettings fields whose change reloads the backend (editors restart on these: RESTART_KEYS in
# editor_clients/vscode/src/settings.ts).
MODEL_FIELDS = (
    "backend",
    "target",
    "draft",
    "device",
    "dtype",
    "runtime",
    "quantize",
    "endpoint",
    "remote_model",
    "api_key_env",
    "fake",
)


# --- value types: each checks a JSON value (returns it parsed or raises ValueError with a short reason) and
# says what JSON Schema type editors declare for it (editor_clients/vscode/package.json; a test compares). ---


@dataclass(frozen=True)
class ValueType:
    json_type: str | tuple[str, ...]  # JSON Schema "type"
    check: Callable[[Any], Any]
    choices: tuple[str, ...] = ()  # JSON Schema "enum"
    minimum: float | None = None
    maximum: float | None = None

    def __call__(self, value: Any) -> Any:
        return self.check(value)


def _check_string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return value


def _check_optional_string(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return _check_string(value)


def _check_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("expected true or false")
    return value


_string = ValueType("string", _check_string)
_optional_string = ValueType(("string", "null"), _check_optional_string)
_bool = ValueType("boolean", _check_bool)


def _choice(options: tuple[str, ...]) -> ValueType:
    def parse(value: Any) -> str:
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
        return str(value)

    return ValueType("string", parse, choices=options)


def _finite(value: Any) -> None:
    # JSON's 1e400 arrives as inf (and int(inf) raises OverflowError, which would drop the whole payload)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("expected a finite number")


def _int_in(low: int, high: int) -> ValueType:
    def parse(value: Any) -> int:
        _finite(value)
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
            raise ValueError("expected a whole number")
        if not low <= value <= high:
            raise ValueError(f"expected a number from {low} to {high}")
        return int(value)

    return ValueType("integer", parse, minimum=low, maximum=high)


def _optional_int_in(low: int, high: int) -> ValueType:
    """A whole number from `low` to `high`, or null: the server chooses (for the machine it runs on)."""
    whole = _int_in(low, high)

    def parse(value: Any) -> int | None:
        return None if value is None else whole(value)

    return ValueType(("integer", "null"), parse, minimum=low, maximum=high)


def _optional_float_in(low: float, high: float) -> ValueType:
    """A number from `low` to `high`, or null: the server chooses (what was measured for the model)."""
    number = _float_in(low, high)

    def parse(value: Any) -> float | None:
        return None if value is None else number(value)

    return ValueType(("number", "null"), parse, minimum=low, maximum=high)


def _float_in(low: float, high: float) -> ValueType:
    def parse(value: Any) -> float:
        _finite(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("expected a number")
        if not low <= value <= high:
            raise ValueError(f"expected a number from {low} to {high}")
        return float(value)

    return ValueType("number", parse, minimum=low, maximum=high)


def _check_rules(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not all(
        isinstance(rule, list | tuple) and len(rule) == 2 and all(isinstance(s, str) for s in rule)
        for rule in value
    ):
        raise ValueError("expected a list of [trigger, continuation] string pairs")
    return tuple((trigger, continuation) for trigger, continuation in value)


_rules = ValueType("array", _check_rules)


# THE declaration of the server's settings: camelCase key -> (attribute path, value type). A dotted path
# reaches into a nested settings dataclass, whose field default is the setting's default (`declared_default`).
# Editors, docs/configuration.md and `specls serve` follow this table (tests/unit/test_settings_agree.py).
_FIELDS: dict[str, tuple[str, ValueType]] = {
    "backend": ("backend", _choice(BACKENDS)),
    "target": ("target", _optional_string),
    "draft": ("draft", _optional_string),
    "device": ("device", _string),
    "dtype": ("dtype", _choice(DTYPES)),
    "runtime": ("runtime", _choice(RUNTIMES)),
    "quantize": ("quantize", _choice(("auto", *QUANTIZATIONS))),
    "endpoint": ("endpoint", _optional_string),
    "remoteModel": ("remote_model", _optional_string),
    "apiKeyEnv": ("api_key_env", _string),
    "maxNewTokens": ("max_new_tokens", _int_in(1, 4096)),
    "temperature": ("temperature", _float_in(0.0, 5.0)),
    "drafter": ("drafter", _choice(DRAFTERS)),
    "debounceMs": ("debounce_ms", _int_in(0, 5000)),
    "firstLineFirst": ("first_line_first", _bool),
    "partialAfterMs": ("partial_after_ms", _int_in(0, 10_000)),
    "firstLineMs": ("first_line_ms", _int_in(0, 60_000)),
    "warm": ("warm", _bool),
    "warmIdleMs": ("warm_idle_ms", _int_in(0, 60_000)),
    "prefetch": ("prefetch", _bool),
    "maxLines": ("context.max_lines", _int_in(1, 1000)),
    "suppressInComments": ("context.suppress_in_comments", _bool),
    "suppressInStrings": ("context.suppress_in_strings", _bool),
    "tokenHealing": ("context.token_healing", _bool),
    "contextTokens": ("context.max_prompt_tokens", _optional_int_in(16, 1_000_000)),
    "suffixTokens": ("context.max_suffix_tokens", _optional_int_in(0, 1_000_000)),
    "promptShape": ("context.prompt_shape", _choice(PROMPT_SHAPES)),
    "minFirstLineProbability": ("context.min_first_line_probability", _optional_float_in(0.0, 1.0)),
    "importedFiles": ("context.imported_files", _bool),
    "importDefinitions": ("context.import_definitions", _bool),
    "steerImports": ("context.steer_imports", _bool),
    "linesBelowTokens": ("context.lines_below_tokens", _optional_int_in(0, 1_000_000)),
}

_FAKE_FIELDS: dict[str, tuple[str, ValueType]] = {
    "tokenDelayMs": ("token_delay_ms", _float_in(0.0, 60_000.0)),
    "loadDelayMs": ("load_delay_ms", _float_in(0.0, 600_000.0)),
    "rules": ("rules", _rules),
    "failLoad": ("fail_load", _optional_string),
}


SETTINGS: Mapping[str, tuple[str, ValueType]] = MappingProxyType(_FIELDS)


def declared_default(key: str) -> Any:
    """The default of a setting: the field default of the ServerSettings attribute it sets."""
    value: Any = ServerSettings()
    for name in SETTINGS[key][0].split("."):
        value = getattr(value, name)
    return value


def _replace_path(obj: Any, path: str, value: Any) -> Any:
    head, _, rest = path.partition(".")
    if rest:
        return dataclasses.replace(obj, **{head: _replace_path(getattr(obj, head), rest, value)})
    return dataclasses.replace(obj, **{head: value})


@dataclass
class SettingsReport:
    invalid: list[str] = field(default_factory=list)  # bad values that fell back: shown to the user
    unknown: list[str] = field(default_factory=list)  # keys we do not know: logged only


def _apply(
    obj: Any,
    raw: Mapping[str, Any],
    fields: Mapping[str, tuple[str, ValueType]],
    where: str,
    report: SettingsReport,
) -> Any:
    for key, value in raw.items():
        if key not in fields:
            report.unknown.append(f"unknown setting {where}{key!r} ignored")
            continue
        path, parse = fields[key]
        try:
            obj = _replace_path(obj, path, parse(value))
        except (ValueError, TypeError, OverflowError) as exc:
            report.invalid.append(
                f"setting {where}{key!r}={value!r} is invalid ({exc}); ignored, the default stays"
            )
    return obj


def apply_settings(raw: Any, base: ServerSettings) -> tuple[ServerSettings, SettingsReport]:
    """Apply camelCase settings in `raw` on top of `base` (a bad value keeps the value from `base`)."""
    report = SettingsReport()
    if raw is None:
        return base, report
    if not isinstance(raw, Mapping):
        report.invalid.append(f"settings must be an object, got {type(raw).__name__}; ignored")
        return base, report
    settings = _apply(base, {k: v for k, v in raw.items() if k != "fake"}, _FIELDS, "", report)
    fake_raw = raw.get("fake")
    if isinstance(fake_raw, Mapping):
        fake = _apply(settings.fake, fake_raw, _FAKE_FIELDS, "fake.", report)
        settings = dataclasses.replace(settings, fake=fake)
    elif fake_raw is not None:
        report.invalid.append("setting 'fake' must be an object; ignored")
    return settings, report


MIN_PROMPT_TOKENS = 64  # the least prompt a completion is worth making with


def fit_to_model(settings: ServerSettings, context_length: int) -> tuple[ServerSettings, list[str]]:
    """`settings` within what a model with a `context_length`-token window can do, and what was changed:
    `maxNewTokens` leaves at least a minimum prompt, and the prompt budget leaves room for `maxNewTokens`."""
    problems: list[str] = []
    least_prompt = min(MIN_PROMPT_TOKENS, context_length // 4)
    most_new = max(1, context_length - least_prompt)
    max_new = settings.max_new_tokens
    if max_new > most_new:
        problems.append(
            f"setting 'maxNewTokens'={max_new} does not fit the model's {context_length}-token window with a "
            f"prompt; using {most_new}"
        )
        max_new = most_new
    reserve = max(settings.context.reserve_tokens, max_new)
    context = dataclasses.replace(settings.context, reserve_tokens=reserve)
    return dataclasses.replace(settings, max_new_tokens=max_new, context=context), problems


def settings_section(raw: Any) -> Any:
    """The specls part of a didChangeConfiguration payload (under "specls", or the whole payload)."""
    if isinstance(raw, Mapping) and isinstance(raw.get("specls"), Mapping):
        return raw["specls"]
    return raw
