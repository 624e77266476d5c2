"""The real code pair: Qwen2.5-Coder-1.5B drafted by Qwen2.5-Coder-0.5B, fp32 greedy identity for every drafter.

Its own module, so the 0.5B engine of `test_qwen_coder` is released before these ~10 GB of fp32 weights load.
Skipped, with the command to run, where either model is not pulled (`scripts/setup.sh --dev` pulls both).
"""

from __future__ import annotations

import pytest
from test_qwen_coder import LARGE, NEW_TOKENS, SMALL, identical_for_every_drafter, load, needs

pytestmark = [pytest.mark.timeout(2400)]


@needs(SMALL, LARGE)
def test_the_pair_is_token_identical_for_every_drafter_in_fp32() -> None:
    from engine.models import default_draft

    assert default_draft(LARGE) == SMALL  # the 0.5B model drafts for the 1.5B one by default
    engine = load(LARGE, SMALL)
    assert engine.draft_decoder is not None
    accepted = identical_for_every_drafter(engine, ("model", "lookup", "stale", "hybrid"))
    assert accepted > 2 * NEW_TOKENS
