"""The copying drafters (prompt lookup, suffix, stale completion) on crafted token sequences."""

from __future__ import annotations

import random

import pytest

from engine.drafters.lookup import NgramIndex, PromptLookupDrafter, continue_from
from engine.drafters.stale import StaleCompletionDrafter
from engine.drafters.suffix import SuffixDrafter

# ---- prompt lookup -----------------------------------------------------------------------------------


def test_lookup_prefers_the_most_recent_occurrence() -> None:
    context = [1, 2, 3, 4, 9, 1, 2, 3, 5, 8, 1, 2, 3]
    draft = PromptLookupDrafter(min_ngram=2, max_ngram=3).propose(context, 2)
    assert draft.token_ids == [5, 8]
    assert draft.draft_probs is None and draft.drafter == "lookup"


def test_lookup_prefers_a_longer_ngram_over_a_more_recent_one() -> None:
    context = [7, 1, 2, 3, 4, 0, 1, 2, 9, 0, 7, 1, 2]
    assert PromptLookupDrafter(min_ngram=2, max_ngram=3).propose(context, 2).token_ids == [3, 4]


def test_lookup_never_matches_the_tail_with_itself() -> None:
    drafter = PromptLookupDrafter(min_ngram=2, max_ngram=4)
    assert drafter.propose([1, 2, 3, 4, 5], 8).token_ids == []
    assert drafter.plans([1, 2, 3, 4, 5]) == []


def test_lookup_respects_min_ngram() -> None:
    context = [4, 8, 6, 1, 4]  # only the single token 4 repeats
    assert PromptLookupDrafter(min_ngram=2).propose(context, 3).token_ids == []
    assert PromptLookupDrafter(min_ngram=1).propose(context, 3).token_ids == [8, 6, 1]


def test_lookup_continues_a_periodic_run_past_the_end_of_the_context() -> None:
    context = [9, 5, 6, 5, 6, 5, 6]
    assert PromptLookupDrafter(min_ngram=2, max_ngram=2).propose(context, 5).token_ids == [5, 6, 5, 6, 5]


def test_lookup_searches_other_files_and_stops_at_their_end() -> None:
    other_file = [20, 21, 22, 23, 24]
    drafter = PromptLookupDrafter([other_file], min_ngram=2)
    assert drafter.propose([1, 2, 21, 22], 10).token_ids == [23, 24]
    (plan,) = drafter.plans([1, 2, 21, 22])
    assert plan.copy_found and plan.match_len == 2


def test_lookup_prefers_the_context_over_other_files_at_equal_length() -> None:
    drafter = PromptLookupDrafter([[30, 31, 40]], min_ngram=2)
    assert drafter.propose([30, 31, 50, 0, 30, 31], 1).token_ids == [50]


def test_lookup_prefers_a_longer_match_in_another_file() -> None:
    drafter = PromptLookupDrafter([[29, 30, 31, 40]], min_ngram=2, max_ngram=3)
    assert drafter.propose([30, 31, 50, 0, 29, 30, 31], 1).token_ids == [40]


def test_lookup_stops_before_stop_ids_and_honours_both_limits() -> None:
    context = [1, 2, 3, 4, 0, 5, 6, 1, 2]
    assert PromptLookupDrafter(stop_ids=[0]).propose(context, 10).token_ids == [3, 4]
    assert PromptLookupDrafter().propose(context, 1).token_ids == [3]
    assert PromptLookupDrafter(max_tokens=3).propose(context, 10).token_ids == [3, 4, 0]


def test_lookup_index_follows_appends_and_edits_like_a_fresh_one() -> None:
    """The kept index (extended on append, rebuilt on edit) must answer exactly as a freshly built one."""
    rng = random.Random(0)
    extras = [[rng.randrange(8) for _ in range(40)]]
    kept = PromptLookupDrafter(extras, min_ngram=1, max_ngram=4)
    context = [rng.randrange(8) for _ in range(30)]
    for step in range(150):
        if step % 5 == 4:  # a keystroke: the prompt changes near its end
            cut = len(context) - rng.randrange(1, 6)
            context = context[:cut] + [rng.randrange(8) for _ in range(rng.randrange(1, 4))]
        else:
            context = context + [rng.randrange(8) for _ in range(rng.randrange(1, 4))]
        fresh = PromptLookupDrafter(extras, min_ngram=1, max_ngram=4)
        assert kept.propose(context, 6).token_ids == fresh.propose(context, 6).token_ids


@pytest.mark.parametrize("keep", ["first", "last"])
def test_ngram_index_built_in_chunks_agrees_with_brute_force(keep: str) -> None:
    rng = random.Random(3)
    seq = [rng.randrange(4) for _ in range(120)]
    index = NgramIndex(2, 4, keep=keep)
    for start in range(0, len(seq), 7):
        index.extend(seq[start : start + 7])
    for end in range(len(seq) + 1):
        tail = seq[:end][-4:]
        expected = None
        for n in range(min(4, len(tail)), 1, -1):
            # continuation starts of earlier occurrences of the n-gram, each followed by at least one token
            starts = [e for e in range(n, len(seq)) if seq[e - n : e] == tail[len(tail) - n :]]
            if starts:
                expected = ((starts[0] if keep == "first" else starts[-1]), n)
                break
        assert index.find(tail) == expected


def test_ngram_index_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        NgramIndex(0, 3)
    with pytest.raises(ValueError):
        NgramIndex(3, 2)
    with pytest.raises(ValueError):
        NgramIndex(1, 2, keep="middle")


def test_continue_from_only_wraps_around_the_context_itself() -> None:
    assert continue_from([1, 2, 3], 1, 5, frozenset()) == [2, 3]
    assert continue_from([1, 2, 3], 1, 5, frozenset(), periodic=True) == [2, 3, 2, 3, 2]


# ---- suffix ------------------------------------------------------------------------------------------


def test_suffix_runs_into_the_text_after_the_cursor() -> None:
    suffix = [40, 41, 42, 43, 44]
    drafter = SuffixDrafter(suffix)
    draft = drafter.propose([1, 2, 3, 40, 41], 10)
    assert draft.token_ids == [42, 43, 44] and draft.drafter == "suffix" and draft.draft_probs is None


def test_suffix_prefers_the_match_nearest_the_cursor() -> None:
    suffix = [10, 11, 12, 13, 10, 11, 14]
    assert SuffixDrafter(suffix).propose([5, 10, 11], 10).token_ids == [12, 13, 10, 11, 14]


def test_suffix_without_a_match_proposes_nothing() -> None:
    drafter = SuffixDrafter([10, 11, 12])
    assert drafter.propose([1, 2, 3], 5).token_ids == []
    assert drafter.plans([1, 2, 3]) == []


def test_suffix_stops_before_stop_ids_and_at_max_tokens() -> None:
    drafter = SuffixDrafter([10, 11, 12, 13, 0, 14], stop_ids=[0])
    assert drafter.propose([10, 11], 10).token_ids == [12, 13]
    assert drafter.propose([10, 11], 1).token_ids == [12]


# ---- stale completion --------------------------------------------------------------------------------

PROMPT = [100, 101, 102, 199]  # ends like a FIM prompt, in a token the completion never contains
EARLIER = [1, 2, 3, 4, 5, 6]


def test_stale_proposes_the_whole_remainder_in_the_first_round() -> None:
    drafter = StaleCompletionDrafter(EARLIER)
    (plan,) = drafter.plans(PROMPT)
    assert plan.drafter == "stale" and plan.copy_found
    draft = drafter.propose(PROMPT, 32)
    assert draft.token_ids == EARLIER and draft.drafter == "stale" and draft.draft_probs is None


def test_stale_continues_after_a_partial_acceptance() -> None:
    drafter = StaleCompletionDrafter(EARLIER)
    drafter.propose(PROMPT, 32)
    assert drafter.propose([*PROMPT, 1, 2, 3], 32).token_ids == [4, 5, 6]
    assert drafter.propose([*PROMPT, 1, 2, 3, 4], 1).token_ids == [5]


def test_stale_aligns_a_single_token_only_at_the_head() -> None:
    drafter = StaleCompletionDrafter(EARLIER)
    drafter.propose(PROMPT, 32)
    assert drafter.propose([*PROMPT, 1], 32).token_ids == [2, 3, 4, 5, 6]
    assert drafter.propose([*PROMPT, 9, 3], 32).token_ids == []  # 3 alone, mid-completion: no alignment


def test_stale_stops_once_the_output_diverges_or_is_done() -> None:
    drafter = StaleCompletionDrafter(EARLIER)
    drafter.propose(PROMPT, 32)
    assert drafter.propose([*PROMPT, 1, 2, 3, 9], 32).token_ids == []
    assert drafter.propose([*PROMPT, *EARLIER], 32).token_ids == []


def test_stale_prefers_to_move_forward_through_a_repeated_pattern() -> None:
    drafter = StaleCompletionDrafter([1, 2, 3, 1, 2, 4])
    drafter.propose(PROMPT, 32)
    assert drafter.propose([*PROMPT, 1, 2, 3, 1, 2], 32).token_ids == [4]


# Token healing: " subp" typed, the target spelled it " subprocess", running "rocess" past the cursor.
PIECES = {" sub": 1, " subprocess": 3, ".": 4, "Popen": 5, "rocess": 6, "(": 7}


def _encode_pieces(text: str) -> list[int]:
    ids = []
    while text:
        piece = max((p for p in PIECES if text.startswith(p)), key=len)
        ids.append(PIECES[piece])
        text = text[len(piece) :]
    return ids


def test_stale_re_encodes_what_follows_a_healed_word_that_ran_past_the_cursor() -> None:
    earlier_text = "rocess.Popen("  # the earlier suggestion's remainder after the typed "p"
    drafter = StaleCompletionDrafter(_encode_pieces(earlier_text), text=earlier_text, encode=_encode_pieces)
    context = [*PROMPT, 3]  # the prompt, then " subprocess"
    drafter.realign("rocess", len(context))
    assert drafter.propose(context, 32).token_ids == [4, 5, 7]  # ".Popen(", on the context's token boundary
    assert drafter.propose([*context, 4], 32).token_ids == [5, 7]  # the same round also took "."


def test_stale_keeps_its_tokens_when_the_overshoot_disagrees_or_there_is_none() -> None:
    earlier_text = "rocess.Popen("
    ids = _encode_pieces(earlier_text)
    drafter = StaleCompletionDrafter(ids, text=earlier_text, encode=_encode_pieces)
    drafter.realign("xyz", len(PROMPT))  # the generated word is not the earlier suggestion's
    assert drafter.completion == ids
    drafter.realign("", len(PROMPT))  # the spelling ended on the cursor: the remainder starts right there
    assert drafter.propose(PROMPT, 32).token_ids == ids
