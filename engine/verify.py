"""Acceptance rules for speculative decoding, as pure functions.

Notation follows Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding",
Algorithm 1: the *target* distribution is p, the *draft* distribution is q. The arguments are named
`target_probs` and `draft_probs` so the two cannot be swapped by accident (implementations disagree on
which letter is which).

Shapes: k drafted tokens; the target is run once over them and yields k + 1 rows: row i is the target's
distribution for drafted position i, and row k is the "bonus" position after the last drafted token.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def warp_logits(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Turn logits [..., vocab] into sampling probabilities: temperature, then top-k, then top-p (nucleus).

    The same warping must be applied to target and draft logits, so that q is the distribution the drafter
    actually sampled from and p is the distribution the output must follow.

    temperature == 0 is the greedy limit: a one-hot distribution on the argmax. top_k == 0 and
    top_p == 1.0 disable those filters. Ties at the k-th logit are all kept (as transformers does).
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    logits = logits.float()
    if temperature == 0:
        one_hot = torch.zeros_like(logits)
        return one_hot.scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)
    logits = logits / temperature
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth_largest = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        # Drop a token when the tokens ranked above it already hold top_p of the mass; the first never drops.
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def greedy_accept(draft_ids: Sequence[int], target_logits: torch.Tensor) -> tuple[int, int]:
    """Greedy verification: accept the longest prefix of the draft that equals the target's argmax.

    `target_logits` has len(draft_ids) + 1 rows. Returns (num_accepted, next_token) where next_token is the
    target's argmax at the first mismatch, or the bonus token when every draft was accepted. The output is
    token-identical to plain greedy decoding of the target.
    """
    k = len(draft_ids)
    if target_logits.shape[0] != k + 1:
        rows = target_logits.shape[0]
        raise ValueError(f"target_logits needs {k + 1} rows for {k} drafted tokens, got {rows}")
    target_choice = target_logits.argmax(dim=-1).tolist()  # one device sync for the whole round
    num_accepted = 0
    while num_accepted < k and draft_ids[num_accepted] == target_choice[num_accepted]:
        num_accepted += 1
    return num_accepted, int(target_choice[num_accepted])


def speculative_sample_accept(
    draft_ids: Sequence[int],
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[int, int]:
    """Speculative sampling, Leviathan et al. 2023, Algorithm 1.

    Drafted token x_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)). At the first rejection the
    next token is sampled from the residual normalize(max(0, p_i - q_i)); when all k are accepted a bonus
    token is sampled from p_k. The returned tokens are then distributed exactly as samples from p.

    draft_probs: [k, vocab], the distributions the drafted tokens were sampled from, or None for a
    deterministic drafter (q is one-hot on the drafted token, so acceptance probability is p_i(x_i)).
    target_probs: [k + 1, vocab], already warped with the same temperature/top-k/top-p.
    One draw of k + 1 uniforms covers the k acceptance tests and the sampling of the next token.
    """
    k = len(draft_ids)
    if target_probs.shape[0] != k + 1:
        rows = target_probs.shape[0]
        raise ValueError(f"target_probs needs {k + 1} rows for {k} drafted tokens, got {rows}")
    if draft_probs is not None and draft_probs.shape[0] != k:
        raise ValueError(f"draft_probs needs {k} rows for {k} drafted tokens, got {draft_probs.shape[0]}")
    if draft_probs is not None:
        draft_probs = _to_vocab_width(draft_probs, target_probs.shape[-1])
    # k + 1 uniforms in one draw: k acceptance tests and one for sampling the next token (by inverse CDF,
    # which costs far less than torch.multinomial for a single sample). float64 keeps u * total < total.
    uniforms = torch.rand(k + 1, generator=generator, device=target_probs.device, dtype=torch.float64)
    num_accepted = k
    if k > 0:
        drafted = torch.tensor(list(draft_ids), device=target_probs.device).unsqueeze(1)
        p_of_draft = target_probs[:k].gather(1, drafted).squeeze(1)
        # u < p/q is tested as u * q < p, so q == 0 cannot produce NaN; one-hot q makes it u < p.
        scaled = (
            uniforms[:k] if draft_probs is None else uniforms[:k] * draft_probs.gather(1, drafted).squeeze(1)
        )
        rejected = (scaled >= p_of_draft).tolist()
        if True in rejected:
            num_accepted = rejected.index(True)
    if num_accepted == k:
        next_distribution = target_probs[k]
    else:
        p_row = target_probs[num_accepted]
        if draft_probs is None:
            # max(0, p - one_hot(x)) is p with x removed.
            next_distribution = p_row.clone()
            next_distribution[draft_ids[num_accepted]] = 0.0
        else:
            next_distribution = (p_row - draft_probs[num_accepted].to(p_row.dtype)).clamp_(min=0.0)
    u = float(uniforms[k])
    next_token = _sample_inverse_cdf(next_distribution, u)
    if next_token is None:
        # The residual vanished through rounding (p == q rejects with probability 0): p is then the law.
        next_token = _sample_inverse_cdf(target_probs[num_accepted], u)
        assert next_token is not None, "target_probs has a row with no mass"
    return num_accepted, next_token


def _sample_inverse_cdf(weights: torch.Tensor, u: float) -> int | None:
    """The token whose cumulative-weight interval holds u * total; None when the weights sum to zero."""
    cdf = weights.double().cumsum(0)
    total = float(cdf[-1])
    if not total > 0.0:
        return None
    # right=True skips zero-weight tokens: their cdf equals the previous one.
    index = int(torch.searchsorted(cdf, torch.tensor([u * total], dtype=cdf.dtype), right=True))
    if index >= len(cdf):  # u * total rounded up to total
        index = int(weights.nonzero()[-1])
    return index


def _to_vocab_width(draft_probs: torch.Tensor, vocab: int) -> torch.Tensor:
    """Models that share a tokenizer may pad their embedding tables differently; padded ids have q == 0."""
    width = draft_probs.shape[-1]
    if width == vocab:
        return draft_probs
    if width > vocab:
        return draft_probs[:, :vocab]
    return torch.nn.functional.pad(draft_probs, (0, vocab - width))
