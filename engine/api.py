"""The seam between the LSP server and whatever produces completions.

Pure Python on purpose (no torch): the server imports this module, the local engine
(`engine.service.LocalEngine`) and remote backends implement it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from engine.costs import StepCosts

# What `CompletionRequest.drafter` may name.
DRAFTERS = ("model", "lookup", "suffix", "stale", "hybrid", "none")
# What decodes the target (`engine.runtime`) and which weight-only quantization it applies (`engine.quantize`);
# here so the server's settings can name them without importing torch.
RuntimeName = Literal["auto", "llama.cpp", "torch"]
RUNTIMES: tuple[RuntimeName, ...] = ("auto", "llama.cpp", "torch")
# int8/int4: weight-only; w8a8: int8 weights and per-row int8 activations (engine.quantize.RowwiseInt8Linear)
Quantization = Literal["none", "int8", "int4", "w8a8"]
QUANTIZATIONS: tuple[Quantization, ...] = ("none", "int8", "int4", "w8a8")

FinishReason = Literal["length", "eos", "stop", "cancelled", "error"]

# Given the completion text generated so far, return the index at which the completion must end
# (generation stops and the text is cut there), or None to keep going. Applied during generation.
StopCheck = Callable[[str], int | None]

# Called with the whole completion text accepted so far, each time it grows.
OnText = Callable[[str], None]


@runtime_checkable
class ConfidenceReader(Protocol):
    """A StopCheck that also reads how sure the target was: before each call with the text, the engine hands
    it `token_probs` and `token_ends` as `CompletionResult` describes them (what a confidence gate needs)."""

    def read_token_probs(self, token_probs: Sequence[float], token_ends: Sequence[int]) -> None: ...


def cut_at_stop(text: str, stop_strings: tuple[str, ...], stop_check: StopCheck | None) -> tuple[str, bool]:
    """`text` as far as a completion that reads it so far may go, and whether a stop rule ended it there.

    The earliest stop string wins; the StopCheck then sees the text up to that cut (what lies past a stop
    string is never shown) and may end it earlier. Every backend applies its stop rules through this.
    """
    cut: int | None = None
    for stop in stop_strings:
        found = text.find(stop) if stop else -1
        if found != -1 and (cut is None or found < cut):
            cut = found
    if stop_check is not None:
        checked = stop_check(text if cut is None else text[:cut])
        if checked is not None and (cut is None or checked < cut):
            cut = max(0, checked)
    return (text, False) if cut is None else (text[:cut], True)


class CancelToken:
    """A flag the decode loop polls between every draft step and every verify step."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.cancelled_at: float | None = None  # time.monotonic() of the first cancel, for cancel->idle stats

    def cancel(self) -> None:
        if self.cancelled_at is None:
            self.cancelled_at = time.monotonic()
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


@dataclass(frozen=True)
class DraftContext:
    """What a draft policy sees of one drafter's offer before a speculative round."""

    text_before: str  # the last few hundred characters before the next token (prompt tail + generated)
    generated: str  # completion text accepted so far
    drafter: str  # name of the drafter offering ("model", "lookup", "suffix", "stale")
    copy_found: bool  # True when a copying drafter (lookup, suffix, stale) found a match this round
    step_costs: StepCosts | None = None  # what longer drafts cost on this device; None when not measured
    match_len: int = 0  # tokens a copying drafter's match is anchored on (0 for a draft model)
    catch_up: int = 0  # context tokens a draft model must read first (`DraftPlan.catch_up`)
    tokens_left: int = 1  # tokens the completion may still generate, to spread a one-time cost over


@dataclass(frozen=True)
class DraftChoice:
    option: int  # which of the offers drafts (an index into them); unused when `length` is 0
    length: int  # how many tokens it drafts; 0: a plain step


NO_DRAFT = DraftChoice(option=0, length=0)


class DraftPolicy(Protocol):
    """The one decider of a round's draft: given every drafter's offer, which one drafts and how far."""

    def choose(self, options: Sequence[DraftContext]) -> DraftChoice: ...


@runtime_checkable
class LearningDraftPolicy(DraftPolicy, Protocol):
    """A policy that learns from each round it chose."""

    def observe(self, drafter: str, num_drafted: int, num_accepted: int) -> None: ...


@dataclass(frozen=True)
class ImportNames:
    """What a Python `from M import ...` line at the cursor may name, as the workspace tells (`engine.imports`
    steers a line that would name anything else to the best-scored name that exists).

    `modules` maps each module the line could spell to the names importable from it (a package's submodules
    among them): relative spellings (".x", "..y.z", "." for the package itself) down to `relative_depth`
    leading dots, and absolute ones whose first part is a package of the workspace. A spelling outside both
    is not judged (the standard library, installed packages). A module whose names hold ANY_NAME may be
    imported from, naming anything (its names are made on demand, or could not be read).

    `wanted` and `wanted_elsewhere` are the names the file uses but does not bind yet (the missing import):
    `wanted` maps each module spelling to those of them it binds, for names some other file of the workspace
    defines; `wanted_elsewhere` holds those none does (the standard library's, an installed package's). Where
    either is non-empty, a `from` line is steered first to importing one of them, then as above.
    `wanted_modules` holds the standard library's modules the file uses whole and does not import
    (`copy.deepcopy(x)` without `import copy`): where it is non-empty, a line at the imports is steered first to
    `import` one of them, or to a `from` line as above.

    `exports`: at a line among the strings of the module's `__all__` list, what the line may list instead
    (`ExportNames`); the line is then no import, and the fields above are not read."""

    line_start: str  # the cursor's line before the cursor, already typed
    modules: Mapping[str, frozenset[str]]
    relative_depth: int = 1
    wanted: Mapping[str, frozenset[str]] = field(default_factory=dict)
    wanted_elsewhere: frozenset[str] = frozenset()
    wanted_modules: frozenset[str] = frozenset()
    exports: ExportNames | None = None


@dataclass(frozen=True)
class ExportNames:
    """What a line among the strings of a Python module's `__all__` list may list: `names` (bound by the module
    or its package's submodules, not listed yet), each as `quote`, name, `quote`, then a comma, which must end
    the line where more of the list follows (`"A"` above `"B"` would join them into one string) or where the
    list's lines all end with one."""

    names: frozenset[str]
    quote: str = '"'
    comma_due: bool = True


ANY_NAME = "*"  # in `ImportNames.modules`: the module's names are open


def may_become_from_import(line: str) -> bool:
    """Whether a line written so far may still turn into a `from` import (where `ImportNames` applies)."""
    stripped = line.lstrip(" \t")
    return stripped.startswith("from") or "from".startswith(stripped)


def may_become_import(line: str) -> bool:
    """Whether a line written so far may still turn into an `import M` statement."""
    stripped = line.lstrip(" \t")
    return stripped.startswith("import") or "import".startswith(stripped)


@dataclass
class CompletionRequest:
    prompt: str  # fully assembled prompt text (FIM template already applied)
    max_new_tokens: int = 64
    temperature: float = 0.0  # 0 means greedy
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop_strings: tuple[str, ...] = ()
    lookup_context: tuple[str, ...] = ()  # snippets from other open files, for the n-gram drafter
    suffix: str = ""  # text after the cursor, for the suffix drafter
    previous_completion: str = ""  # an earlier suggestion whose remainder may be re-verified in one pass
    drafter: str = "hybrid"  # "model" | "lookup" | "suffix" | "stale" | "hybrid" | "none"
    stop_check: StopCheck | None = None
    draft_policy: DraftPolicy | None = None  # overrides the engine's own (benchmarks, tests)
    draft_confidence_stop: float | None = None  # overrides the draft model's own stop (benchmarks)
    # Benchmarks: generate max_new_tokens whatever the model says, so every method does the same work.
    ignore_end_of_text: bool = False
    # Token healing: text the completion must begin with, already typed and left out of the prompt's end
    # (the word fragment before the cursor). It is generated under a constraint and left out of the result.
    forced_prefix: str = ""
    # False: the completion may not start with a blank line after a forced prefix that ends a line (inside a
    # Python bracket, where formatters keep none).
    blank_line: bool = True
    # At a Python import line: the modules and names the workspace has (`ImportNames`); None elsewhere.
    import_names: ImportNames | None = None


@dataclass
class EngineStats:
    """What one completion did. The local engine fills the counters; a remote backend fills what its server
    reports under the same names, and the layers around a backend add why a result is empty."""

    prompt_tokens: int = 0
    reused_prompt_tokens: int = 0  # found in the KV cache from the previous call
    truncated_prompt_tokens: int = 0  # cut from the left to fit the window
    target_forwards: int = 0
    drafted: int = 0  # draft tokens verified (a forced prefix's spelling is counted apart, in per_drafter)
    accepted: int = 0
    new_tokens: int = 0
    forced_tokens: int = 0  # of new_tokens, those that re-spelled a forced prefix
    steered_import_rows: int = 0  # rows of logits where an import line's misfitting tokens were masked
    # Per drafter name ("model", "lookup", ..., "forced"): rounds, drafted, accepted.
    per_drafter: dict[str, dict[str, int]] = field(default_factory=dict)
    accepted_histogram: list[int] = field(default_factory=list)  # rounds by drafts accepted
    prefill_s: float = 0.0
    decode_s: float = 0.0
    wall_s: float = 0.0
    # Set around the engine: why a result has no text, and the server's stop rules that cut it.
    empty_reason: str = ""
    stop_rules_fired: list[str] = field(default_factory=list)
    waited_for_turn: bool = False  # cancelled while another session held a shared engine
    # A remote backend: the endpoint (never its credentials), an error, and its server's own report.
    remote: str = ""
    error: str = ""
    first_text_s: float | None = None
    server_finish_reason: str = ""
    server_timings: dict[str, Any] = field(default_factory=dict)

    def count_round(self, drafter: str, drafted: int, accepted: int, *, in_totals: bool) -> None:
        per = self.per_drafter.setdefault(drafter, {"rounds": 0, "drafted": 0, "accepted": 0})
        per["rounds"] += 1
        per["drafted"] += drafted
        per["accepted"] += accepted
        if not in_totals:
            return
        self.drafted += drafted
        self.accepted += accepted
        self.accepted_histogram.extend([0] * (accepted + 1 - len(self.accepted_histogram)))
        self.accepted_histogram[accepted] += 1

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# EngineStats fields that a server sums over its session (the rest describe one completion).
SUMMED_STATS = (
    "target_forwards",
    "drafted",
    "accepted",
    "prompt_tokens",
    "reused_prompt_tokens",
    "new_tokens",
    "forced_tokens",
    "steered_import_rows",
)


@dataclass
class CompletionResult:
    text: str
    finish_reason: FinishReason
    token_ids: list[int] = field(default_factory=list)
    stats: EngineStats = field(default_factory=EngineStats)
    # Per token of token_ids (the local engine; empty where a backend does not know them): the target's
    # probability of that token (softmax of its logits, before any sampling warp, under a forced prefix's
    # constraint), and where the token's text ends in `text` (a forced prefix's own tokens end at 0).
    token_probs: list[float] = field(default_factory=list)
    token_ends: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class BackendInfo:
    name: str  # "local", "openai", "fake", ...
    target: str
    draft: str | None
    special_tokens: tuple[str, ...]  # the tokenizer's special tokens, for FIM template detection
    context_length: int
    device: str
    token_healing: bool = False  # honours CompletionRequest.forced_prefix
    runtime: str = ""  # what decodes the target and why (`engine.runtime.RuntimeChoice.describe`)
    # The prompt shape measured best for this model ("prefix-only", "fim"), or "auto": FIM when the
    # tokenizer has a known family's FIM tokens (`engine.catalog.CatalogModel.prompt`).
    prompt_shape: str = "auto"
    # The confidence gate measured for this model (`engine.catalog.CatalogModel.first_line_gate`), what
    # `minFirstLineProbability` is when the user sets none; 0: not calibrated, no gate.
    first_line_gate: float = 0.0
    # The lines below the cursor ahead of the file's text measured for this model
    # (`engine.catalog.CatalogModel.lines_below_tokens`), what `linesBelowTokens` is when the user sets none.
    lines_below_tokens: int = 0
    # What the loaded models cost, in MB (`engine.service.model_memory`): "weights_mb", "kv_cache_mb",
    # "rss_added_by_load_mb"; empty for backends that hold no weights in this process.
    memory: dict[str, float | None] = field(default_factory=dict)
    # Measured at load (`engine.costs.measure_step_costs`); 0 where nothing was measured (remote, fake).
    prompt_tokens_per_s: float = 0.0
    step_s: float = 0.0  # one plain decode step of the target
    # What a draft model, if one runs, speeds decoding by at least (`engine.costs.conservative_speedup`).
    speculative_speedup: float = 1.0
    model_choice: str = ""  # why this target runs: named by the user, or the default rule's reason
    # The engine can read a second prompt into a cache of its own while requests keep being served from the
    # first (`AsideWarmingBackend`): a larger prompt grown in the background.
    reads_prompts_aside: bool = False


def refuse_forced_prefix(request: CompletionRequest, backend: str) -> None:
    """For backends whose `info().token_healing` is False: a forced prefix would be silently dropped."""
    if request.forced_prefix:
        raise ValueError(f"the {backend} backend cannot force a prefix (token healing is local only)")


class CompletionBackend(Protocol):
    """Everything the server needs from a model. `complete` blocks; the server calls it from one worker thread."""

    def info(self) -> BackendInfo: ...

    def count_tokens(self, text: str) -> int: ...

    def complete(
        self,
        request: CompletionRequest,
        *,
        on_text: OnText | None = None,
        cancel: CancelToken | None = None,
    ) -> CompletionResult: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class WarmResult:
    """What a warm-up left in the KV cache: `cached_tokens` of the prompt's `prompt_tokens`."""

    cached_tokens: int
    prompt_tokens: int


@runtime_checkable
class PromptCachingBackend(Protocol):
    """A backend that can say how much of a prompt its cache already holds, so the server can choose a
    prompt it can read before the next key (`lsp_server.scheduling.budget`)."""

    def prompt_tokens_cached(self, prompt: str) -> tuple[int, int]:
        """(tokens of `prompt` already cached, tokens of `prompt`)."""
        ...


@runtime_checkable
class WarmingBackend(Protocol):
    """A backend that can fill its cache with a prompt while the user is idle, so that the request that
    follows finds it computed. Low priority: the caller cancels it for any real request, and what it
    computed before the cancel stays cached."""

    def warm(self, request: CompletionRequest, *, cancel: CancelToken | None = None) -> WarmResult: ...


@runtime_checkable
class AsideWarmingBackend(Protocol):
    """A backend that can read a prompt into a second cache while the one requests are served from stays as
    it is (where `BackendInfo.reads_prompts_aside`). A request whose prompt the second cache holds more of is
    then served from it. Low priority like `warm`: cancelled for any real request, keeping what it read."""

    def warm_aside(self, request: CompletionRequest, *, cancel: CancelToken | None = None) -> WarmResult: ...
