"""The baseline every speed claim is measured against: one target forward per generated token.

It shares the window rule, prefix reuse, stop rules and streaming with the speculative loop
(`engine.generation`), so the two differ only in how many tokens one forward yields.
"""

from __future__ import annotations

import torch

from engine.api import CancelToken, CompletionResult, OnText
from engine.decoder import CausalDecoder, forward_or_cancel
from engine.generation import Decode, DecodeSettings, start_decoding, token_probabilities
from engine.healing import ForcedPrefix
from engine.imports import ImportLineConstraint


def autoregressive_generate(
    target: CausalDecoder,
    prompt_ids: list[int],
    settings: DecodeSettings,
    *,
    decode: Decode,
    on_text: OnText | None = None,
    cancel: CancelToken | None = None,
    forced: ForcedPrefix | None = None,
    imports: ImportLineConstraint | None = None,
) -> CompletionResult:
    """Greedy or sampled decoding; prompts longer than the window are cut from the left (`fit_prompt`).

    With `forced`, the first tokens must spell its text (token healing, `engine.healing`), which the
    result's text leaves out. With `imports`, an import line is steered to what the workspace has
    (`engine.imports`).
    """
    with torch.inference_mode():
        run = start_decoding(
            target, prompt_ids, settings, decode=decode, on_text=on_text, forced=forced, cancel=cancel
        )
        pending = run.prompt_ids[-1]  # fed next; its logits choose the next token
        while run.output.finish is None:
            logits = forward_or_cancel(target, [pending], cancel)  # stops between layers on a cancel
            if logits is None:
                run.output.cancel()
                break
            if forced is not None:
                logits = forced.constrain(logits)
            if imports is not None:
                logits = imports.constrain(logits)
            token = run.picker.pick(logits[0])
            if forced is not None:
                forced.advance([token])
            if imports is not None:
                imports.advance([token])
            run.stats.target_forwards += 1
            run.output.extend([token], token_probabilities(logits, [token]))
            pending = token
    return run.finish(unfinished="length")
