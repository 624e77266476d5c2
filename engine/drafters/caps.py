"""The longest draft each kind of drafter may propose in a round, what counts as an anchored match, and where
a draft model stops on its own doubt: one home for the numbers the drafters and the draft policy
(`engine.drafters.length`) share."""

from __future__ import annotations

MAX_LENGTH = {"model": 16, "copy": 32}  # a draft model's tokens, and copied ones (lookup, suffix)
STALE_LENGTH = 64  # an earlier suggestion's remainder is re-verified whole: it is usually right
LONG_ANCHOR = 4  # a copied draft whose match is anchored on this many tokens is a different bet
CONFIDENCE_STOP = 0.4  # a draft model stops at a token it gives less than this (`specls bench draft-length`)
