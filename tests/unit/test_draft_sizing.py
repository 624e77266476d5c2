"""Draft sizing math and the device step costs it prices drafts with."""

from __future__ import annotations

import pytest

from engine.costs import StepCosts, measure_step_costs
from engine.drafters.sizing import AcceptanceCurve, best_draft_length, expected_accepted_by_length


def test_expected_accepted_multiplies_continuation_rates() -> None:
    assert expected_accepted_by_length([0.5, 0.5, 0.5]) == pytest.approx([0, 0.5, 0.75, 0.875])
    assert expected_accepted_by_length([1.0] * 3) == [0, 1, 2, 3]
    assert expected_accepted_by_length([0.9]) == pytest.approx([0, 0.9])
    assert expected_accepted_by_length([]) == [0]


def test_best_draft_length_trades_tokens_against_cost() -> None:
    # Tokens per cost: k=0 1/1, k=1 1.9/1.2, k=2 1.99/1.4, k=3 2.071/1.6: one draft pays best.
    assert best_draft_length([0.9, 0.1, 0.9], lambda k: 1 + 0.2 * k, 3)[0] == 1
    assert best_draft_length([0.9] * 16, lambda k: 1.0, 16)[0] == 16  # free verifies: draft all the way
    assert best_draft_length([0.9] * 16, lambda k: 1.0, 5)[0] == 5
    assert (
        best_draft_length([0.3] * 8, lambda k: 1.3 + 0.1 * k if k else 1.0, 8)[0] == 0
    )  # a plain step pays best


def test_acceptance_curve_counts_positions_reached_and_held() -> None:
    curve = AcceptanceCurve(max_length=4, prior_weight=4.0)
    curve.record(drafted=4, accepted=2)  # positions 1, 2 held, 3 was tried and failed, 4 never reached
    assert curve.tried == [1, 1, 1, 0] and curve.held == [1, 1, 0, 0]
    assert curve.continue_probs([0.5] * 4) == pytest.approx([0.6, 0.6, 0.4, 0.5])
    assert curve.continue_probs([0.5, 0.5, 0.5, 0.9])[3] == pytest.approx(0.9)  # no data: the prior
    curve.record(drafted=9, accepted=9)  # longer than the curve: counted up to its length
    assert curve.tried == [2, 2, 2, 1] and curve.rounds == 2
    curve.forget(0.5)
    assert curve.tried == [1, 1, 1, 0.5] and curve.held == [1, 1, 0.5, 0.5]
    with pytest.raises(ValueError, match="prior"):
        curve.continue_probs([0.5])


def test_step_costs_interpolate_and_extend() -> None:
    costs = StepCosts(widths=(1, 4, 8), verify=(1.2, 1.8, 2.6), draft_step=0.1)
    assert costs.verify_cost(0) == 1.0
    assert costs.verify_cost(1) == pytest.approx(1.2)
    assert costs.verify_cost(2) == pytest.approx(1.4)
    assert costs.verify_cost(16) == pytest.approx(2.6 + 0.2 * 8)  # the last segment's slope
    assert costs.round_cost(4, drafted_by_model=True) == pytest.approx(1.8 + 0.4)
    assert costs.round_cost(4, drafted_by_model=False) == pytest.approx(1.8)
    with pytest.raises(ValueError):
        StepCosts(widths=(4, 1), verify=(1.0, 1.0), draft_step=0.0)
    with pytest.raises(ValueError):
        StepCosts(widths=(1,), verify=(), draft_step=0.0)


class FakeDecoder:
    """Advances a fake clock by `base + per_token * len(ids)` per forward, and keeps a token cache."""

    def __init__(self, clock: list[float], base: float, per_token: float) -> None:
        self.clock, self.base, self.per_token = clock, base, per_token
        self.cached: list[int] = []

    def forward(self, ids: list[int]) -> object:
        self.clock[0] += self.base + self.per_token * len(ids)
        self.cached += ids
        return None

    def crop(self, length: int) -> None:
        del self.cached[length:]


def test_measure_step_costs_prices_widths_relative_to_a_plain_step() -> None:
    clock = [0.0]
    target = FakeDecoder(clock, base=1.0, per_token=0.1)  # plain step 1.1
    draft = FakeDecoder(clock, base=0.1, per_token=0.01)
    costs = measure_step_costs(
        target.forward, target.crop, draft.forward, draft.crop, window=128, clock=lambda: clock[0]
    )
    assert costs.widths == (1, 2, 4, 8, 16, 32)
    assert costs.verify_cost(8) == pytest.approx((1.0 + 0.1 * 9) / 1.1)
    assert costs.draft_step == pytest.approx(0.11 / 1.1)
    assert target.cached == [] and draft.cached == []  # both caches left empty
    small = measure_step_costs(target.forward, target.crop, None, None, window=20, clock=lambda: clock[0])
    assert small.widths == (1, 2, 4, 8) and small.draft_step == 0.0  # only widths that fit the window


def test_a_one_time_cost_pays_off_only_over_enough_tokens_left() -> None:
    probs, cost = [0.9] * 8, lambda k: 1.0 + 0.1 * k
    assert best_draft_length(probs, cost, 8)[0] == 8
    assert best_draft_length(probs, cost, 8, one_time_cost=40.0, tokens_left=16)[0] == 0  # never recouped
    assert best_draft_length(probs, cost, 8, one_time_cost=40.0, tokens_left=10_000)[0] == 8
