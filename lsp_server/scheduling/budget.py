"""The keystroke budget, as pure arithmetic: how much prompt a request can afford to read.

A suggestion is worth something only if it arrives before the user has typed past it. On a CPU that reads
prompts at ~100-200 tokens/s (a laptop without native bf16), the configured prompt (`contextTokens`, 1,536
by default) takes 8-15 s to read from scratch, so the first suggestion in a just-opened file would come long
after the user moved on. The engine measures its own prompt speed and step at load (`BackendInfo`); from
those, a request whose prompt is mostly not in the cache gets a smaller one, what it can read and still
write a first line within FIRST_SUGGESTION_S. A prompt that is mostly cached (the user typing on, a warm-up
that finished) keeps its full size: its uncached part is a few tokens. Where the engine measured nothing
(remote and fake backends) the setting alone decides.
"""

from __future__ import annotations

from engine.api import BackendInfo
from engine.costs import AT_REST_SUGGESTION_S as AT_REST_SUGGESTION_S
from engine.costs import FIRST_LINE_TOKENS as FIRST_LINE_TOKENS
from engine.costs import FIRST_SUGGESTION_S as FIRST_SUGGESTION_S
from engine.costs import LINE_START_SUGGESTION_S as LINE_START_SUGGESTION_S
from engine.costs import MIN_PROMPT_TOKENS as MIN_PROMPT_TOKENS
from engine.costs import first_line_fits, first_line_seconds, readable_prompt_tokens


def reading_s(uncached_tokens: int, info: BackendInfo) -> float | None:
    """Seconds to read `uncached_tokens` of prompt; None where the prompt speed was not measured."""
    if info.prompt_tokens_per_s <= 0:
        return None
    return uncached_tokens / info.prompt_tokens_per_s


def affordable_prompt_tokens(info: BackendInfo, configured: int, seconds: float = FIRST_SUGGESTION_S) -> int:
    """The longest prompt a request can read from scratch and still write a first line within `seconds`,
    within the configured budget and never below MIN_PROMPT_TOKENS (or the configured budget, if smaller)."""
    if info.prompt_tokens_per_s <= 0:
        return configured
    affordable = readable_prompt_tokens(info.prompt_tokens_per_s, info.step_s, seconds)
    return max(min(configured, MIN_PROMPT_TOKENS), min(configured, affordable))


def needs_smaller_prompt(
    cached_tokens: int,
    prompt_tokens: int,
    info: BackendInfo,
    configured: int,
    seconds: float = FIRST_SUGGESTION_S,
) -> int | None:
    """The smaller prompt budget a request should use instead of `configured`, or None to keep its prompt:
    None when the part of it not yet cached can be read in time (or the speed is unknown)."""
    affordable = affordable_prompt_tokens(info, configured, seconds)
    if affordable >= configured:
        return None
    uncached = reading_s(prompt_tokens - cached_tokens, info)
    if uncached is None or uncached + FIRST_LINE_TOKENS * info.step_s <= seconds:
        return None
    return affordable


# Drafters that run the draft model, the only speculation a fit estimate credits (copying drafters propose
# nothing in code that repeats nothing).
MODEL_DRAFTERS = ("model", "hybrid")


def first_line_fit(
    info: BackendInfo, drafter: str = "hybrid", seconds: float = FIRST_SUGGESTION_S
) -> tuple[bool | None, str]:
    """Whether the loaded model can bring a first suggestion in a just-opened file within `seconds`, and a
    line start's first line while the user types within LINE_START_SUGGESTION_S, and the numbers: reading the
    smallest prompt the budget allows (MIN_PROMPT_TOKENS) and writing FIRST_LINE_TOKENS at the measured step,
    sped up only by what a draft model earns at a conservative acceptance (`BackendInfo.speculative_speedup`),
    as `engine.costs.first_line_seconds` computes it (the default model was chosen by the same arithmetic over
    a calibration, `engine.costs.estimate_first_line`). None where the engine measured nothing."""
    if info.step_s <= 0 or info.prompt_tokens_per_s <= 0:
        return None, "not measured by this backend"
    speedup = info.speculative_speedup if drafter in MODEL_DRAFTERS else 1.0
    read_s, line_s = first_line_seconds(info.step_s, info.prompt_tokens_per_s, speedup)
    fits = first_line_fits(read_s, line_s, seconds)
    drafted = f" / {speedup:.2f} (the draft model, conservatively)" if speedup > 1 else ""
    typing = "within" if line_s <= LINE_START_SUGGESTION_S else "past"
    return fits, (
        f"{'fits' if fits else 'does not fit'}: {MIN_PROMPT_TOKENS} prompt tokens at "
        f"{info.prompt_tokens_per_s:.0f} tokens/s ({read_s:.2f} s) and a first line of {FIRST_LINE_TOKENS} "
        f"tokens at {info.step_s * 1000:.0f} ms a step{drafted} ({line_s:.2f} s) take {line_s + read_s:.2f} s "
        f"of the {seconds:g} s keystroke budget; the line alone, at a line start while typing, is {typing} "
        f"{LINE_START_SUGGESTION_S:g} s"
    )
