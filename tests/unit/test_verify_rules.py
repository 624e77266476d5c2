"""Acceptance rules on hand-built distributions whose outcomes are known exactly."""

from __future__ import annotations

import pytest
import torch

from engine.verify import greedy_accept, speculative_sample_accept, warp_logits


def one_hot(index: int, vocab: int) -> torch.Tensor:
    row = torch.zeros(vocab)
    row[index] = 1.0
    return row


# ---- warp_logits -------------------------------------------------------------------------------------


def test_warp_with_temperature_is_softmax_of_scaled_logits() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    torch.testing.assert_close(warp_logits(logits, 0.5), torch.softmax(logits / 0.5, dim=-1))


def test_warp_temperature_zero_is_one_hot_argmax() -> None:
    logits = torch.tensor([[0.1, 3.0, 2.9], [5.0, 0.0, 0.0]])
    torch.testing.assert_close(warp_logits(logits, 0.0), torch.stack([one_hot(1, 3), one_hot(0, 3)]))


def test_warp_top_k_keeps_exactly_the_k_largest() -> None:
    logits = torch.tensor([1.0, 4.0, 3.0, 2.0, 0.0])
    probs = warp_logits(logits, 1.0, top_k=2)
    assert probs.nonzero().flatten().tolist() == [1, 2]
    torch.testing.assert_close(probs[[1, 2]], torch.softmax(torch.tensor([4.0, 3.0]), dim=-1))


def test_warp_top_p_keeps_the_smallest_set_reaching_p() -> None:
    # probabilities 0.5, 0.3, 0.15, 0.05: top_p=0.7 needs the first two (0.5 < 0.7 <= 0.8).
    probs_in = torch.tensor([0.05, 0.5, 0.15, 0.3])
    probs = warp_logits(probs_in.log(), 1.0, top_p=0.7)
    torch.testing.assert_close(probs, torch.tensor([0.0, 0.5 / 0.8, 0.0, 0.3 / 0.8]))
    # A single dominant token is kept alone even for a tiny top_p.
    assert warp_logits(probs_in.log(), 1.0, top_p=0.01).nonzero().flatten().tolist() == [1]


def test_warp_rows_are_independent() -> None:
    logits = torch.randn(3, 11, generator=torch.Generator().manual_seed(0))
    together = warp_logits(logits, 0.8, top_k=5, top_p=0.9)
    one_by_one = torch.stack([warp_logits(row, 0.8, top_k=5, top_p=0.9) for row in logits])
    torch.testing.assert_close(together, one_by_one)
    torch.testing.assert_close(together.sum(dim=-1), torch.ones(3))


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(-0.1, 0, 1.0), (1.0, -1, 1.0), (1.0, 0, 0.0), (1.0, 0, 1.5)]
)
def test_warp_rejects_invalid_settings(temperature: float, top_k: int, top_p: float) -> None:
    with pytest.raises(ValueError):
        warp_logits(torch.zeros(4), temperature, top_k, top_p)


# ---- greedy_accept -----------------------------------------------------------------------------------


def logits_preferring(tokens: list[int], vocab: int = 6) -> torch.Tensor:
    return torch.stack([one_hot(t, vocab) * 5.0 for t in tokens])


def test_greedy_accepts_everything_and_takes_the_bonus() -> None:
    assert greedy_accept([3, 1, 4], logits_preferring([3, 1, 4, 5])) == (3, 5)


def test_greedy_stops_at_first_mismatch_with_the_target_choice() -> None:
    assert greedy_accept([3, 1, 4], logits_preferring([3, 2, 4, 5])) == (1, 2)
    assert greedy_accept([3, 1, 4], logits_preferring([0, 1, 4, 5])) == (0, 0)


def test_greedy_without_draft_is_a_plain_step() -> None:
    assert greedy_accept([], logits_preferring([2])) == (0, 2)


def test_greedy_requires_one_row_more_than_the_draft() -> None:
    with pytest.raises(ValueError, match="4 rows"):
        greedy_accept([1, 2, 3], logits_preferring([1, 2, 3]))


# ---- speculative_sample_accept -------------------------------------------------------------------------


def test_identical_draft_and_target_always_accept() -> None:
    gen = torch.Generator().manual_seed(1)
    target_probs = torch.softmax(torch.randn(4, 7, generator=gen), dim=-1)
    draft_probs = target_probs[:3].clone()
    for _ in range(200):
        drafted = torch.multinomial(draft_probs, 1, generator=gen).flatten().tolist()
        num_accepted, _ = speculative_sample_accept(drafted, draft_probs, target_probs, gen)
        assert num_accepted == 3


def test_draft_token_the_target_forbids_is_rejected_and_never_resampled() -> None:
    gen = torch.Generator().manual_seed(2)
    target_probs = torch.tensor([[0.0, 0.5, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]])
    draft_probs = torch.tensor([[0.9, 0.05, 0.05, 0.0]])  # mass on token 0, which p forbids
    residual_counts = torch.zeros(4)
    for _ in range(300):
        num_accepted, next_token = speculative_sample_accept([0], draft_probs, target_probs, gen)
        assert num_accepted == 0
        residual_counts[next_token] += 1
    assert residual_counts[0] == 0 and residual_counts[3] == 0
    assert residual_counts[1] > 0 and residual_counts[2] > 0


def test_one_hot_draft_on_a_certain_token_is_accepted_and_bonus_follows_last_row() -> None:
    gen = torch.Generator().manual_seed(3)
    target_probs = torch.stack([one_hot(2, 5), one_hot(4, 5), one_hot(1, 5)])
    for _ in range(50):
        assert speculative_sample_accept([2, 4], None, target_probs, gen) == (2, 1)


def test_one_hot_draft_on_an_impossible_token_falls_back_to_the_target() -> None:
    gen = torch.Generator().manual_seed(4)
    target_probs = torch.stack([torch.tensor([0.0, 0.5, 0.5]), torch.tensor([1.0, 0.0, 0.0])])
    seen = set()
    for _ in range(100):
        num_accepted, next_token = speculative_sample_accept([0], None, target_probs, gen)
        assert num_accepted == 0
        seen.add(next_token)
    assert seen == {1, 2}  # the residual max(0, p - one_hot(0)) is p itself


def test_acceptance_frequency_is_min_one_p_over_q() -> None:
    # p(x)/q(x) = 0.2/0.8 = 0.25 for the drafted token x = 0: accepted in a quarter of the trials.
    gen = torch.Generator().manual_seed(5)
    target_probs = torch.tensor([[0.2, 0.8], [0.5, 0.5]])
    draft_probs = torch.tensor([[0.8, 0.2]])
    trials = 4000
    accepted = sum(speculative_sample_accept([0], draft_probs, target_probs, gen)[0] for _ in range(trials))
    # Binomial(4000, 0.25) has standard deviation 27.4; 5 sigma is 137.
    assert abs(accepted - trials * 0.25) < 137


def test_narrower_draft_vocabulary_is_padded_with_zero_probability() -> None:
    gen = torch.Generator().manual_seed(6)
    target_probs = torch.tensor([[0.0, 0.5, 0.5, 0.0], [0.0, 0.0, 0.0, 1.0]])
    draft_probs = torch.tensor([[0.0, 1.0, 0.0]])  # one column fewer than the target
    num_accepted, next_token = speculative_sample_accept([1], draft_probs, target_probs, gen)
    assert num_accepted in (0, 1)
    assert next_token == (3 if num_accepted == 1 else 2)


def test_sampling_requires_matching_row_counts() -> None:
    target_probs = torch.full((2, 3), 1 / 3)
    with pytest.raises(ValueError, match="target_probs"):
        speculative_sample_accept([0, 1], None, target_probs)
    with pytest.raises(ValueError, match="draft_probs"):
        speculative_sample_accept([0], torch.full((2, 3), 1 / 3), target_probs)
