"""Statistical check that speculative sampling is lossless: the tokens it emits follow the target's law.

Target and draft are Markov chains over a 3-token vocabulary (the next token's law depends on the previous
token), so a row misalignment between drafted positions and target rows would change the joint law. We
generate 3 tokens per trial with rounds of k = 2 drafts and compare the empirical joint distribution of
(x1, x2, x3) with the exact target joint by a chi-square goodness-of-fit test.

Threshold: the 0.999 quantile of chi-square with df = (cells with positive probability) - 1, from the
Wilson-Hilferty approximation (accurate to about 1% for df >= 10). With a correct sampler a random seed
fails with probability 0.001; the seeds are fixed, so the test is deterministic. Negative controls show the
same test rejects two plausible bugs (accepting every draft; resampling from p instead of the residual).
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Callable

import torch

from engine.verify import speculative_sample_accept

VOCAB = 3
LENGTH = 3
DRAFTS_PER_ROUND = 2
START = 0

# Rows: previous token; columns: next token. Zeros in p where q has mass, and in q where p has mass,
# exercise both sides of max(0, p - q).
TARGET = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.0, 0.9], [0.4, 0.4, 0.2]])
DRAFT = torch.tensor([[0.2, 0.2, 0.6], [0.3, 0.5, 0.2], [0.0, 0.9, 0.1]])

Rule = Callable[[list[int], torch.Tensor | None, torch.Tensor, torch.Generator], tuple[int, int]]


def accept_every_draft(
    draft_ids: list[int], draft_probs: torch.Tensor | None, target_probs: torch.Tensor, gen: torch.Generator
) -> tuple[int, int]:
    bonus = torch.multinomial(target_probs[len(draft_ids)], 1, generator=gen)
    return len(draft_ids), int(bonus)


def resample_from_target(
    draft_ids: list[int], draft_probs: torch.Tensor | None, target_probs: torch.Tensor, gen: torch.Generator
) -> tuple[int, int]:
    # Correct acceptance test, wrong correction: samples from p, not from normalize(max(0, p - q)).
    num_accepted, _ = speculative_sample_accept(draft_ids, draft_probs, target_probs, gen)
    return num_accepted, int(torch.multinomial(target_probs[num_accepted], 1, generator=gen))


def target_joint() -> dict[tuple[int, ...], float]:
    joint = {}
    for seq in itertools.product(range(VOCAB), repeat=LENGTH):
        prob, prev = 1.0, START
        for token in seq:
            prob *= float(TARGET[prev, token])
            prev = token
        joint[seq] = prob
    return joint


def simulate(rule: Rule, deterministic_draft: bool, trials: int, seed: int) -> Counter[tuple[int, ...]]:
    gen = torch.Generator().manual_seed(seed)
    draft_rng = random.Random(seed)  # drafting is not under test; Python's RNG keeps it cheap
    draft_rows = DRAFT.tolist()
    counts: Counter[tuple[int, ...]] = Counter()
    for _ in range(trials):
        seq = [START]
        while len(seq) <= LENGTH:
            drafted: list[int] = []
            prev = seq[-1]
            for _ in range(DRAFTS_PER_ROUND):
                row = draft_rows[prev]
                token = (
                    max(range(VOCAB), key=row.__getitem__)
                    if deterministic_draft
                    else (draft_rng.choices(range(VOCAB), weights=row)[0])
                )
                drafted.append(token)
                prev = token
            draft_probs = None if deterministic_draft else DRAFT[[seq[-1], *drafted[:-1]]]
            target_probs = TARGET[[seq[-1], *drafted]]
            num_accepted, next_token = rule(drafted, draft_probs, target_probs, gen)
            seq += [*drafted[:num_accepted], next_token]
        counts[tuple(seq[1 : LENGTH + 1])] += 1
    return counts


def chi_square(counts: Counter[tuple[int, ...]], trials: int) -> tuple[float, int]:
    """Statistic and degrees of freedom; outcomes the target forbids must never occur."""
    statistic, cells = 0.0, 0
    for seq, prob in target_joint().items():
        if prob == 0.0:
            assert counts[seq] == 0, f"emitted {seq}, which the target gives probability 0"
            continue
        expected = trials * prob
        statistic += (counts[seq] - expected) ** 2 / expected
        cells += 1
    return statistic, cells - 1


def chi_square_quantile_999(df: int) -> float:
    z = 3.0902  # standard normal 0.999 quantile
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


# 3,000 trials give each of the 22 possible outcomes an expected count of at least 18 (the smallest joint
# probability is 0.006); the negative controls below land several times over the threshold with 1,500.
TRIALS = 3000
CONTROL_TRIALS = 1500


def test_probabilistic_draft_emits_the_target_distribution() -> None:
    statistic, df = chi_square(simulate(speculative_sample_accept, False, TRIALS, seed=11), TRIALS)
    assert statistic < chi_square_quantile_999(df)


def test_deterministic_one_hot_draft_emits_the_target_distribution() -> None:
    statistic, df = chi_square(simulate(speculative_sample_accept, True, TRIALS, seed=12), TRIALS)
    assert statistic < chi_square_quantile_999(df)


def test_the_check_detects_a_sampler_that_accepts_every_draft() -> None:
    counts = simulate(accept_every_draft, False, CONTROL_TRIALS, seed=13)
    statistic = sum(
        (counts[seq] - CONTROL_TRIALS * prob) ** 2 / (CONTROL_TRIALS * prob)
        for seq, prob in target_joint().items()
        if prob > 0
    )
    forbidden = sum(counts[seq] for seq, prob in target_joint().items() if prob == 0)
    assert forbidden > 0 or statistic > chi_square_quantile_999(len(counts) - 1)


def test_the_check_detects_resampling_from_the_target_instead_of_the_residual() -> None:
    counts = simulate(resample_from_target, False, CONTROL_TRIALS, seed=14)
    statistic, df = chi_square(counts, CONTROL_TRIALS)
    assert statistic > chi_square_quantile_999(df)
