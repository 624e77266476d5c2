"""Token healing in both decode loops: the constrained plain loop matches a no-cache reference, and greedy
speculative output is token-identical to it for every drafter."""

from __future__ import annotations

import pytest
import torch
from engine_core_support import decode, local_engine, tiny_gpt2, tiny_llama, tokenizer

from engine.api import CompletionRequest

NEW_TOKENS = 20
ARCHITECTURES = {"llama": tiny_llama, "gpt2": tiny_gpt2}
PROMPT = "class Point:\n    def __init__(self, x, y):\n        self.x = x\n       "
# Whitespace healing: the prompt ends at the line start and the indentation (with any word after it) is forced.
LINE_START = "class Point:\n    def __init__(self, x, y):\n        self.x = x\n"
CASES = (
    *((PROMPT, forced) for forced in (" self", " se", " return", " sel", " y")),
    *((LINE_START, forced) for forced in ("        ", "        se", "\t\t")),
    (LINE_START.rstrip("\n"), "\n        "),  # the line break too, as the context builder heals it
    (LINE_START.rstrip("\n"), "\n\n\n"),  # after two blank lines, no third
    (LINE_START.rstrip("\n"), "\n\n"),  # after one, the model may still open a second
    ("x =", " "),
)
WHITESPACE = " \t\r\n"


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def reference_constrained_greedy(model: torch.nn.Module, prompt: list[int], forced: str, n: int) -> list[int]:
    """Full forward per token, no cache; while `forced` is not spelled, only tokens that fit it may win. A
    forced text that ends in a space or tab is followed by a character other than whitespace; one that ends in
    two blank lines, by a character other than a line break. In a forced text with a line break, whitespace is
    spelled with the tokenizer's tokens for it before a word, as long as one ends inside it."""
    tok = tokenizer()
    texts = [tok.decode([tok.encode("a")[-1], i])[1:] for i in range(len(tok))]
    special = set(tok.all_special_ids)
    banned_next = WHITESPACE if forced[-1:] in (" ", "\t") else "\r\n" if forced.endswith("\n\n\n") else ""
    ids, remaining, awaits_next = list(prompt), forced, False

    def tokenizer_step(remaining: str) -> int | None:
        whitespace = remaining[: len(remaining) - len(remaining.lstrip(WHITESPACE))]
        if not whitespace:
            return None
        first = tok.encode(whitespace + "x", add_special_tokens=False)[0]
        text = texts[first]
        return first if text and len(text) < len(whitespace) and whitespace.startswith(text) else None

    with torch.inference_mode():
        for _ in range(n):
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            step = tokenizer_step(remaining) if "\n" in forced else None
            if step is not None:
                fits = [step]
            elif remaining:
                fits = [
                    i
                    for i, text in enumerate(texts)
                    if i not in special
                    and text
                    and "\ufffd" not in text
                    and (text.startswith(remaining) or remaining.startswith(text))
                    and (text[len(remaining) : len(remaining) + 1] or "-") not in tuple(banned_next)
                ]
            if remaining:
                keep = torch.full_like(logits, float("-inf"))
                keep[fits] = logits[fits]
                logits = keep
            elif awaits_next:
                banned = [
                    i for i, text in enumerate(texts) if i not in special and (text[:1] or "-") in banned_next
                ]
                logits[banned] = float("-inf")
            token = int(logits.argmax())
            text = texts[token]
            if remaining:
                awaits_next = bool(banned_next) and text == remaining
                remaining = "" if text.startswith(remaining) else remaining[len(text) :]
            else:
                awaits_next = False
            ids.append(token)
    return ids[len(prompt) :]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_constrained_baseline_matches_the_no_cache_reference(arch: str) -> None:
    target = ARCHITECTURES[arch](seed=31)
    engine = local_engine(target, ARCHITECTURES[arch](seed=32))
    assert engine.info().token_healing
    for prompt, forced in CASES:
        result = engine.complete(
            CompletionRequest(prompt, max_new_tokens=NEW_TOKENS, drafter="none", forced_prefix=forced)
        )
        expected = reference_constrained_greedy(target, engine.encode(prompt), forced, NEW_TOKENS)
        ends = [i for i, token in enumerate(expected) if token in engine.eos_ids]
        expected = expected[: ends[0]] if ends else expected  # the engine stops at end of text
        assert result.token_ids == expected, forced
        full = decode(result.token_ids)
        assert full.startswith(forced)
        assert result.text == full[len(forced) :]  # what was typed already is not suggested again
        if forced[-1] in " \t":  # no second indentation, no empty first line
            assert result.text[:1] not in tuple(WHITESPACE), (forced, result.text)
        if forced.endswith("\n\n\n"):  # no third blank line
            assert result.text[:1] not in ("\n", "\r"), (forced, result.text)
        spelled = next(n for n in range(1, len(expected) + 1) if len(decode(expected[:n])) >= len(forced))
        assert result.stats.forced_tokens == spelled


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("drafter", ["model", "lookup", "stale", "hybrid"])
def test_greedy_speculation_with_a_forced_prefix_is_identical_to_the_baseline(
    arch: str, drafter: str
) -> None:
    target = ARCHITECTURES[arch](seed=41)
    forced_rounds = {"drafted": 0, "accepted": 0}
    for draft in (target, ARCHITECTURES[arch](seed=42)):  # a perfect draft model and a poor one
        engine = local_engine(target, draft)
        for prompt, forced in CASES:
            plain = CompletionRequest(prompt, max_new_tokens=NEW_TOKENS, drafter="none", forced_prefix=forced)
            want = engine.complete(plain)
            request = CompletionRequest(
                prompt,
                max_new_tokens=NEW_TOKENS,
                drafter=drafter,
                forced_prefix=forced,
                lookup_context=(prompt + decode(want.token_ids),),
                previous_completion=want.text,
            )
            got = engine.complete(request)
            assert got.token_ids == want.token_ids, (forced, draft is target)
            assert got.text == want.text
            assert got.stats.forced_tokens == want.stats.forced_tokens >= 1
            per = got.stats.per_drafter["forced"]
            assert per["rounds"] >= 1
            # The drafters' totals leave the forced spelling out: it is no drafter's guess.
            others = [v for name, v in got.stats.per_drafter.items() if name != "forced"]
            assert got.stats.drafted == sum(v["drafted"] for v in others)
            assert got.stats.accepted == sum(v["accepted"] for v in others)
            forced_rounds["drafted"] += per["drafted"]
            forced_rounds["accepted"] += per["accepted"]
    # Random models often prefer another spelling than the tokenizer's: both outcomes were exercised.
    assert 0 < forced_rounds["accepted"] < forced_rounds["drafted"]


def test_sampled_speculation_spells_the_forced_prefix() -> None:
    engine = local_engine(tiny_llama(seed=51), tiny_llama(seed=52))
    for seed in range(6):
        request = CompletionRequest(
            PROMPT, max_new_tokens=12, temperature=1.0, seed=seed, drafter="hybrid", forced_prefix=" return"
        )
        result = engine.complete(request)
        assert decode(result.token_ids).startswith(" return")
        assert result.text == decode(result.token_ids)[len(" return") :]


def test_sampled_speculation_spells_the_indentation_and_then_a_word() -> None:
    engine = local_engine(tiny_llama(seed=53), tiny_llama(seed=54))
    for seed in range(6):
        request = CompletionRequest(
            LINE_START,
            max_new_tokens=12,
            temperature=1.5,
            seed=seed,
            drafter="hybrid",
            forced_prefix="        ",
        )
        result = engine.complete(request)
        assert decode(result.token_ids).startswith("        ")
        assert result.text == decode(result.token_ids)[len("        ") :]
        assert result.text[:1] not in tuple(WHITESPACE), result.text


def test_a_budget_too_small_for_the_forced_prefix_returns_nothing_visible() -> None:
    engine = local_engine(tiny_llama(seed=61), tiny_llama(seed=62))
    for drafter in ("none", "hybrid"):
        result = engine.complete(
            CompletionRequest(PROMPT, max_new_tokens=1, drafter=drafter, forced_prefix=" return")
        )
        assert result.text == ""
        assert result.finish_reason == "length"
        assert len(result.token_ids) == 1 and " return".startswith(decode(result.token_ids))


@pytest.mark.parametrize("forced", [" retur", " __ini", " Poin", " rang"])
def test_identity_holds_when_the_spelling_runs_past_the_cursor_into_an_earlier_suggestion(
    forced: str,
) -> None:
    """Fragments that end mid-token: the word's last token runs past the cursor, and the earlier suggestion
    (drafted by the stale drafter) is re-encoded after that overshoot."""
    engine = local_engine(tiny_llama(seed=81), tiny_llama(seed=82))
    plain = CompletionRequest(PROMPT, max_new_tokens=NEW_TOKENS, drafter="none", forced_prefix=forced)
    want = engine.complete(plain)
    for drafter in ("stale", "hybrid"):
        request = CompletionRequest(
            PROMPT,
            max_new_tokens=NEW_TOKENS,
            drafter=drafter,
            forced_prefix=forced,
            previous_completion=want.text,
        )
        got = engine.complete(request)
        assert got.token_ids == want.token_ids
        assert got.text == want.text
