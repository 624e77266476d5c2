"""The real code pair: Qwen2.5-Coder-1.5B drafted by Qwen2.5-Coder-0.5B, fp32 greedy identity for every drafter.

Its own module, so the 0.5B engine of `test_qwen_coder` is released before these ~10 GB of fp32 weights load.
Skipped, with the command to run, where either model is not pulled (`scripts/setup.sh --dev` pulls both).
"""

from __future__ import annotations

import pytest
from engine_core_support import FixedLength
from test_qwen_coder import LARGE, NEW_TOKENS, SMALL, identical_for_every_drafter, load, needs

pytestmark = [pytest.mark.timeout(2400)]


@needs(SMALL, LARGE)
def test_the_pair_is_token_identical_for_every_drafter_in_fp32() -> None:
    from engine.models import default_draft

    assert default_draft(LARGE) == SMALL  # the 0.5B model drafts for the 1.5B one by default
    engine = load(LARGE, SMALL)
    assert engine.draft_decoder is not None
    counts = identical_for_every_drafter(engine, ("model", "lookup", "stale", "hybrid"))
    assert sum(accepted for accepted, _ in counts.values()) > NEW_TOKENS
    # Drafting 4 tokens a round, the 0.5B model's drafts are mostly right: a real same-family pair.
    fixed = identical_for_every_drafter(engine, ("model",), draft_policy=FixedLength(4))
    accepted, drafted = fixed["model"]
    assert drafted >= 8 and accepted / drafted > 0.5, fixed
