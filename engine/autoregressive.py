"""The baseline every speed claim is measured against: one target forward per generated token.

It shares the window rule, prefix reuse, stop rules and streaming with the speculative loop
(`engine.generation`), so the two differ only in how many tokens one forward yields.
"""

from __future__ import annotations

from time import perf_counter

import torch

from engine.api import CancelToken, CompletionResult, EngineStats, OnText
from engine.decoder import CausalDecoder, device_of
from engine.generation import (
    Decode,
    DecodeSettings,
    OutputTracker,
    TokenPicker,
    finish_result,
    fit_prompt,
    sync_cache,
)
from engine.healing import ForcedPrefix


def autoregressive_generate(
    target: CausalDecoder,
    prompt_ids: list[int],
    settings: DecodeSettings,
    *,
    decode: Decode,
    on_text: OnText | None = None,
    cancel: CancelToken | None = None,
    forced: ForcedPrefix | None = None,
) -> CompletionResult:
    """Greedy or sampled decoding; prompts longer than the window are cut from the left (`fit_prompt`).

    With `forced`, the first tokens must spell its text (token healing, `engine.healing`), which the
    result's text leaves out.
    """
    start = perf_counter()
    prompt_ids, dropped = fit_prompt(prompt_ids, target.max_length, settings.max_new_tokens)
    with torch.inference_mode():
        reused = sync_cache(target, prompt_ids)
        prefilled = perf_counter()
        stats = EngineStats(len(prompt_ids), reused, dropped)
        picker = TokenPicker(settings, device_of(target))
        output = OutputTracker(settings, decode, on_text, forced.text if forced is not None else "")
        pending = prompt_ids[-1]  # fed next; its logits choose the next token
        while output.finish is None:
            if cancel is not None and cancel.cancelled:
                output.cancel()
                break
            logits = target.forward([pending])
            if forced is not None:
                logits = forced.constrain(logits)
            token = picker.pick(logits[0])
            if forced is not None:
                forced.advance([token])
            stats.target_forwards += 1
            output.extend([token])
            pending = token
    return finish_result(
        output,
        stats,
        started=start,
        prefilled=prefilled,
        forced_tokens=forced.spelled_tokens if forced is not None else 0,
        unfinished="length",
    )
