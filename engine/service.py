"""`LocalEngine`: the in-process `CompletionBackend` the language server uses by default.

It owns the model pair and both KV caches for its whole life, so consecutive keystrokes reuse the cached
prompt prefix. Use it from ONE worker thread (a lock makes concurrent calls wait rather than corrupt the
caches). Per request it builds the drafters the request asks for: the draft model, n-gram lookup over the
prompt and `lookup_context`, the text after the cursor (`suffix`) and an earlier completion
(`previous_completion`), or a hybrid that offers all of theirs, from which the draft policy picks per round.

Greedy output never depends on what the caches hold. A seeded sampled request is reproducible on a fresh
engine; on a warm one the lookup index carried across calls may change which drafts are tried, and with
them the random stream (never the output distribution).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import torch

from engine.api import (
    DRAFTERS,
    BackendInfo,
    CancelToken,
    CompletionRequest,
    CompletionResult,
    DraftPolicy,
    OnText,
    WarmResult,
)
from engine.autoregressive import autoregressive_generate
from engine.costs import StepCosts, conservative_speedup, time_decoders
from engine.decoder import CacheCloningDecoder
from engine.drafters.base import Drafter
from engine.drafters.caps import CONFIDENCE_STOP, MAX_LENGTH
from engine.drafters.hybrid import HybridDrafter
from engine.drafters.length import DraftAcceptance, LearnedDraftPolicy
from engine.drafters.lookup import PromptLookupDrafter
from engine.drafters.model import ModelDrafter
from engine.drafters.stale import StaleCompletionDrafter
from engine.drafters.suffix import SuffixDrafter
from engine.generation import DecodeSettings, fit_prompt, sync_cache
from engine.healing import ForcedPrefix, TokenTexts, can_spell_words
from engine.hf_decoder import context_length
from engine.imports import ImportLineConstraint
from engine.memory import process_memory_mb, return_freed_memory
from engine.models import ModelPair, end_of_text_ids, load_pair
from engine.runtime import RuntimeChoice, build_draft_decoder, build_target_decoder
from engine.sequences import common_prefix_length
from engine.speculative import PollingDecoder, speculative_generate

if TYPE_CHECKING:
    from engine.catalog import CatalogModel
    from engine.decoder import CausalDecoder


# The static KV cache is allocated for the whole window: Qwen2.5's 32,768 positions would cost 0.8 GB (0.5B,
# bf16) for prompts the server caps at a few thousand tokens.
DEFAULT_MAX_CONTEXT = 8192


def pulled_catalog_entry(folder: str | None) -> CatalogModel | None:
    """The catalog entry of a pulled model (found by its pull record), with what was measured for it (the
    prompt shape, the confidence gate); None for any other folder or hub id."""
    from pathlib import Path

    from engine.catalog import CATALOG, catalog_name_of

    name = catalog_name_of(Path(folder)) if folder else None
    return CATALOG[name] if name else None


def decoder_weight_mb(decoder: object) -> float | None:
    """Bytes of the weights a lean decoder holds (its projections as stored, embeddings, norms), in MB;
    None for decoders that do not expose them (llama.cpp, transformers)."""
    layers = getattr(decoder, "layers", None)
    if layers is None:
        return None
    seen: set[int] = set()
    total = 0

    # A layer holds linears, a linear holds tensors, or two linears (a quantized draft's `SplitLinear`).
    def add(value: object, depth: int = 0) -> None:
        nonlocal total
        if isinstance(value, torch.Tensor):
            # A weight prepacked for oneDNN has no storage to point at; it is never shared, so its own id keys it.
            key = id(value) if value.is_mkldnn else value.data_ptr()
            if key not in seen:
                seen.add(key)
                total += value.numel() * value.element_size()
        elif depth < 3 and hasattr(value, "__dict__"):
            for item in vars(value).values():
                add(item, depth + 1)

    for part in (*layers, getattr(decoder, "lm_head", None)):
        add(part)
    for name in ("embed", "final_norm"):
        add(getattr(decoder, name, None))
    return total / 2**20


def model_memory(target: object, draft: object | None, rss_before: float | None) -> dict[str, float | None]:
    """What the loaded models cost: their weights as the decoders hold them, the KV caches, and the process's
    resident memory added by loading (all MB), for `specls/stats` and benchmarks."""
    weights = [decoder_weight_mb(decoder) for decoder in (target, draft) if decoder is not None]
    caches = [
        sum(
            t.numel() * t.element_size()
            for t in (getattr(d, "keys", None), getattr(d, "values", None))
            if isinstance(t, torch.Tensor)
        )
        / 2**20
        for d in (target, draft)
        if d is not None
    ]
    now = process_memory_mb()
    return {
        "weights_mb": None if None in weights else sum(w for w in weights if w is not None),
        "kv_cache_mb": sum(caches),
        "rss_added_by_load_mb": None if now is None or rss_before is None else now - rss_before,
    }


class LocalEngine:
    """Speculative decoding with a local target/draft pair; `drafter="none"` runs the plain baseline."""

    def __init__(
        self,
        target: str | None = None,
        draft: str | None = None,
        device: str = "auto",
        *,
        dtype: str = "auto",
        pair: ModelPair | None = None,
        max_context: int | None = None,
        runtime: str = "auto",
        quantization: str = "auto",
        draft_quantization: str = "auto",
        keep_hf_model: bool = False,
        model_choice: str = "",
    ) -> None:
        # A pair loaded here belongs to this engine: once the lean decoders hold the weights, the HF modules'
        # copies are freed (one copy of each model in memory) unless a caller still runs them
        # (`keep_hf_model`). A pair passed in is the caller's and stays whole.
        release = pair is None and not keep_hf_model
        rss_before = process_memory_mb()
        self.pair = pair if pair is not None else load_pair(target, draft, device, dtype)
        self.tokenizer = self.pair.tokenizer
        models = [self.pair.target] if self.pair.draft is None else [self.pair.target, self.pair.draft]
        window = min(context_length(model) for model in models)
        window = min(window, max_context or DEFAULT_MAX_CONTEXT)
        self.window = window
        source = self.pair.target_source
        self.target, self.runtime = build_target_decoder(
            self.pair.target,
            source.location if source.is_local else None,
            window,
            runtime=runtime,
            quantization=quantization,
            threads=torch.get_num_threads(),
            release=release,
        )
        # None: no draft model shares the target's tokenizer; the copying drafters still run.
        self.draft_decoder: CausalDecoder | None = None
        self.draft_runtime: RuntimeChoice | None = None
        if self.pair.draft is not None:
            self.draft_decoder, self.draft_runtime = build_draft_decoder(
                self.pair.draft, window, quantization=draft_quantization, release=release
            )
        # A second cache of the target, made on the first `warm_aside`: a larger prompt is read there while
        # requests are still served from the first. The two swap roles when a request's prompt shares more
        # with the second (`_serve_from_best_cache`).
        self._aside: CausalDecoder | None = None
        self.eos_ids = end_of_text_ids(self.tokenizer, self.pair.target)
        self._lookup: tuple[tuple[str, ...], PromptLookupDrafter] | None = None
        self.draft_acceptance = DraftAcceptance()  # how long each drafter's drafts hold, on this model
        self._lock = threading.Lock()
        self.token_texts = TokenTexts.from_tokenizer(self.tokenizer)
        self.step_costs = self._measure_step_costs()
        measured = pulled_catalog_entry(self.pair.target_source.location if source.is_local else None)
        self.prompt_shape = measured.prompt if measured is not None else "auto"
        self.first_line_gate = measured.first_line_gate if measured is not None else 0.0
        self.lines_below_tokens = measured.lines_below_tokens if measured is not None else 0
        return_freed_memory()  # the step-cost forwards' scratch, freed but still resident
        self.memory = model_memory(self.target, self.draft_decoder, rss_before)
        self.model_choice = model_choice  # why this target (`BackendInfo.model_choice`)

    @torch.inference_mode()
    def _measure_step_costs(self) -> StepCosts:
        """Price wide verifies and draft steps once, so draft-length policies size drafts for this device."""
        return self.time_steps(context_tokens=256, repeats=10)

    def time_steps(self, *, context_tokens: int, repeats: int) -> StepCosts:
        """Time the target's step, its verifies and the draft's step from empty caches (left empty), as at
        load; benchmarks call this at their prompts' length."""
        with torch.inference_mode():
            return time_decoders(
                self.target,
                self.draft_decoder,
                context_tokens=context_tokens,
                repeats=repeats,
                synchronize=self._synchronize_logits,
            )

    def reset_caches(self) -> None:
        """Empty both KV caches: the next request reads its whole prompt (what a benchmark's cold call
        measures). Greedy output never depends on it."""
        with self._lock:
            self.target.crop(0)
            if self._aside is not None:
                self._aside.crop(0)
            if self.draft_decoder is not None:
                self.draft_decoder.crop(0)

    def synchronize(self) -> None:
        """Wait for the device's queued work (CUDA runs asynchronously), so a clock read after it is honest."""
        if self.pair.device.type == "cuda":
            torch.cuda.synchronize()

    def _synchronize_logits(self, logits: object) -> None:
        if self.pair.device.type == "cuda" and isinstance(logits, torch.Tensor):
            logits[-1, 0].item()

    def info(self) -> BackendInfo:
        return BackendInfo(
            name="local",
            target=self.pair.target_source.location,
            draft=self.pair.draft_source.location if self.pair.draft_source is not None else None,
            special_tokens=tuple(self.tokenizer.all_special_tokens),
            context_length=self.window,
            device=str(self.pair.device),
            token_healing=can_spell_words(self.token_texts),
            runtime=self.runtime.describe()
            + (f"; draft: {self.draft_runtime.describe()}" if self.draft_runtime is not None else ""),
            prompt_shape=self.prompt_shape,
            first_line_gate=self.first_line_gate,
            lines_below_tokens=self.lines_below_tokens,
            memory=dict(self.memory),
            prompt_tokens_per_s=self.step_costs.prompt_tokens_per_s,
            step_s=self.step_costs.step_s,
            speculative_speedup=(
                conservative_speedup(self.step_costs) if self.draft_decoder is not None else 1.0
            ),
            model_choice=self.model_choice,
            reads_prompts_aside=isinstance(self.target, CacheCloningDecoder),
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: list[int]) -> str:
        # Special tokens end a completion (`end_of_text_ids`); skipping them here keeps any other path clean.
        return str(self.tokenizer.decode(token_ids, skip_special_tokens=True))

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def prompt_tokens_cached(self, prompt: str) -> tuple[int, int]:
        """(tokens of `prompt` the target's cache already holds, tokens of `prompt`): what a request for it
        would have to read. A peek from another thread may see a cache being changed; it is only a hint."""
        prompt_ids = self.encode(prompt)
        caches = (self.target,) if self._aside is None else (self.target, self._aside)
        return max(common_prefix_length(cache.cached_tokens, prompt_ids) for cache in caches), len(prompt_ids)

    def _serve_from_best_cache(self, prompt_ids: list[int]) -> None:
        """Serve from the second cache when it holds more of this prompt (a prompt grown aside); under the
        lock."""
        aside = self._aside
        if aside is None:
            return
        if common_prefix_length(aside.cached_tokens, prompt_ids) > common_prefix_length(
            self.target.cached_tokens, prompt_ids
        ):
            self.target, self._aside = aside, self.target

    def complete(
        self,
        request: CompletionRequest,
        *,
        on_text: OnText | None = None,
        cancel: CancelToken | None = None,
    ) -> CompletionResult:
        if request.drafter not in DRAFTERS:
            raise ValueError(f"unknown drafter {request.drafter!r}; expected one of {', '.join(DRAFTERS)}")
        prompt_ids = self.encode(request.prompt)
        settings = DecodeSettings.from_request(
            request, frozenset() if request.ignore_end_of_text else self.eos_ids
        )
        forced = None
        if request.forced_prefix:
            forced = ForcedPrefix(request.forced_prefix, self.encode, self.token_texts, request.blank_line)
        imports = None
        if request.import_names is not None:
            imports = ImportLineConstraint(request.import_names, self.token_texts, request.forced_prefix)
        with self._lock:
            self._serve_from_best_cache(prompt_ids)
            if request.drafter == "none":
                result = autoregressive_generate(
                    self.target,
                    prompt_ids,
                    settings,
                    decode=self.decode,
                    on_text=on_text,
                    cancel=cancel,
                    forced=forced,
                    imports=imports,
                )
            else:
                result = speculative_generate(
                    self.target,
                    self._build_drafter(request, cancel),
                    prompt_ids,
                    settings,
                    self._draft_policy(request),
                    decode=self.decode,
                    on_text=on_text,
                    cancel=cancel,
                    # A seeded request prices drafts with the assumed costs: the timing measured at load must
                    # not change which drafts are tried, and so which tokens the seed samples.
                    step_costs=self.step_costs if request.seed is None else None,
                    forced=forced,
                    imports=imports,
                )
        if imports is not None:
            result.stats.steered_import_rows = imports.steered_rows
        return result

    def warm(self, request: CompletionRequest, *, cancel: CancelToken | None = None) -> WarmResult:
        """Prefill the target's cache with the prompt `request` would send (fitted to the window the same
        way), then the draft model's where the prompt fits its window, generating nothing; a cancel stops it
        soon and keeps what it computed. A warm draft model can draft at once: the draft policy prices what a
        cold one must read first."""
        prompt_ids = self.encode(request.prompt)
        if len(prompt_ids) < 2:
            return WarmResult(0, len(prompt_ids))
        fitted, _ = fit_prompt(prompt_ids, self.target.max_length, request.max_new_tokens)
        with self._lock, torch.inference_mode():
            sync_cache(self.target, fitted, cancel)
            cached = common_prefix_length(self.target.cached_tokens, fitted)
            draft = self.draft_decoder
            if draft is not None and len(fitted) + MAX_LENGTH["model"] <= draft.max_length:
                sync_cache(draft, fitted, cancel)
        # The last prompt token is never cached (the first decode step feeds it): all but it is all.
        return WarmResult(len(fitted) if cached >= len(fitted) - 1 else cached, len(fitted))

    def warm_aside(self, request: CompletionRequest, *, cancel: CancelToken | None = None) -> WarmResult:
        """`warm`, into the target's second cache: the one requests are served from keeps its prompt until a
        request's prompt shares more with this one. The draft model's cache is left alone. Where the
        decoder cannot make a second cache (`BackendInfo.reads_prompts_aside` False) nothing is read.

        A prompt that goes on from most of what the served cache holds (the user typed on after a grown
        prompt took over) extends that cache instead, as the next request would: read aside, it would be
        read again from its first token."""
        prompt_ids = self.encode(request.prompt)
        fitted, _ = fit_prompt(prompt_ids, self.target.max_length, request.max_new_tokens)
        with self._lock, torch.inference_mode():
            serving = common_prefix_length(self.target.cached_tokens, fitted)
            if serving >= len(fitted) - 1 or not isinstance(self.target, CacheCloningDecoder):
                return WarmResult(len(fitted) if serving >= len(fitted) - 1 else serving, len(fitted))
            aside = self._aside
            shared_aside = common_prefix_length(aside.cached_tokens, fitted) if aside is not None else 0
            if serving > shared_aside and 2 * serving >= len(self.target.cached_tokens):
                reader: CausalDecoder = self.target
            else:
                if self._aside is None:
                    self._aside = self.target.with_own_cache()
                reader = self._aside
            sync_cache(reader, fitted, cancel)
            cached = common_prefix_length(reader.cached_tokens, fitted)
        return WarmResult(len(fitted) if cached >= len(fitted) - 1 else cached, len(fitted))

    def _draft_policy(self, request: CompletionRequest) -> DraftPolicy:
        """The request's own policy, else the learned one: learning into this model's acceptance, or from
        scratch for a seeded request (which then samples the same tokens every time, on any engine)."""
        if request.draft_policy is not None:
            return request.draft_policy
        if request.seed is not None:
            return LearnedDraftPolicy()
        return LearnedDraftPolicy(acceptance=self.draft_acceptance)

    def close(self) -> None:
        with self._lock:
            self._lookup = None

    def _build_drafter(self, request: CompletionRequest, cancel: CancelToken | None) -> Drafter:
        kind = request.drafter
        if kind == "model" and self.draft_decoder is None:
            raise ValueError("drafter 'model' needs a draft model; this target runs without one (--draft)")
        model = self._model_drafter(request, cancel) if kind in ("model", "hybrid", "stale") else None
        lookup = self._lookup_drafter(request.lookup_context) if kind in ("lookup", "hybrid") else None
        suffix_ids = self.encode(request.suffix) if request.suffix and kind in ("suffix", "hybrid") else []
        suffix = SuffixDrafter(suffix_ids, stop_ids=self.eos_ids) if suffix_ids else None
        stale_ids = self.encode(request.previous_completion) if request.previous_completion else []
        stale = None
        if stale_ids and kind in ("stale", "hybrid"):
            stale = StaleCompletionDrafter(stale_ids, text=request.previous_completion, encode=self.encode)
        single: dict[str, Drafter | None] = {"model": model, "lookup": lookup, "suffix": suffix}
        if kind == "hybrid":
            return HybridDrafter(model=model, lookup=lookup, suffix=suffix, stale=stale)
        if kind == "stale":  # an earlier completion first, the draft model when it runs out
            return HybridDrafter(model=model, stale=stale)
        chosen = single[kind]
        # "suffix" with an empty suffix has nothing to copy: the hybrid with no drafters drafts nothing.
        return chosen if chosen is not None else HybridDrafter()

    def _model_drafter(self, request: CompletionRequest, cancel: CancelToken | None) -> ModelDrafter | None:
        if self.draft_decoder is None:
            return None
        generator = None
        if request.temperature > 0:
            generator = torch.Generator(device=self.pair.device)
            if request.seed is not None:
                generator.manual_seed(request.seed + 1)  # independent of the target's stream
            else:
                generator.seed()
        return ModelDrafter(
            PollingDecoder(self.draft_decoder, cancel),  # a cancel is seen between draft steps
            temperature=request.temperature,
            top_k=request.top_k,
            top_p=request.top_p,
            generator=generator,
            confidence_threshold=(
                CONFIDENCE_STOP if request.draft_confidence_stop is None else request.draft_confidence_stop
            ),
        )

    def _lookup_drafter(self, lookup_context: tuple[str, ...]) -> PromptLookupDrafter:
        """Indexing other files costs milliseconds per keystroke: keep the drafter while they are the same."""
        if self._lookup is None or self._lookup[0] != lookup_context:
            extras = [self.encode(snippet) for snippet in lookup_context if snippet]
            self._lookup = (lookup_context, PromptLookupDrafter(extras, stop_ids=self.eos_ids))
        return self._lookup[1]
