"""Prefetch, as pure decisions: while a suggestion is on screen and the engine is idle, compute the next one
as if it were accepted (a `Generation` with `assumed_accepted`). Accepting it, or typing it out, is answered
from that prefetch; any other edit, or a real request, drops it.

The arithmetic of the assumed text lives here too: the worker builds a prefetch's prompt from the
document with the part of the suggestion not typed yet inserted (`untyped_rest`)."""

from __future__ import annotations

from dataclasses import dataclass

from lsp_server.jobs import Generation
from lsp_server.scheduling.settings import SchedulingSettings
from lsp_server.typed_ahead import still_agrees, typed_since

# A prefetch's prompt is built from the document with its suggestion inserted, which the syntax tree must
# re-parse; in a file this big that takes seconds the next keystroke would wait for (measured: 2.8 s for
# the key after a completion on a 2 MB line, tests/e2e/test_faults_inputs.py).
PREFETCH_MAX_CHARS = 200_000


@dataclass(frozen=True)
class PrefetchPlan:
    """The document as it would be with `suggestion` accepted, and the cursor after it."""

    assumed_text: str
    anchor: int
    suggestion: str


def plan_prefetch(
    settings: SchedulingSettings,
    doc_text: str,
    anchor: int,
    suggestion: str,
    *,
    ready: bool,
    engine_busy: bool,
    prefetch_running: bool,
) -> PrefetchPlan | None:
    """What to prefetch with `suggestion` shown at `anchor` of `doc_text`; None: nothing now."""
    if not settings.prefetch or not suggestion or not ready or engine_busy or prefetch_running:
        return None
    if len(doc_text) > PREFETCH_MAX_CHARS:
        return None
    assumed_text = doc_text[:anchor] + suggestion + doc_text[anchor:]
    return PrefetchPlan(assumed_text, anchor + len(suggestion), suggestion)


def still_fits(prefetch: Generation, text: str | None) -> bool:
    """The document (`text`; None: closed) is on the way to the text the prefetch assumed (its suggestion
    partly typed or accepted), or past it with typing its own text agrees with."""
    if text is None:
        return False
    if prefetch.assumed_part_typed(text) is not None:
        return True
    typed = typed_since(prefetch.doc_text, prefetch.anchor, text)
    return typed is not None and still_agrees(prefetch.text, typed)


def untyped_rest(prefetch: Generation, text: str) -> tuple[int, str] | None:
    """Where to insert what the user has not typed yet of the prefetch's assumed suggestion into the
    document `text`, and that rest ("" once all of it is there); None when the document went elsewhere."""
    typed = prefetch.assumed_part_typed(text)
    if typed is None:
        return None
    start = prefetch.anchor - len(prefetch.assumed_accepted)
    return start + typed, prefetch.assumed_accepted[typed:]
