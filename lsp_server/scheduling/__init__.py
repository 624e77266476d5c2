"""Who runs which completion, when: newest-wins per document, the cancel bridge, answers without a model
call, waiting, prefetch and warm-ups.

Threads. The event loop owns every `Generation` field that changes after creation (streamed text, waiters,
done), every `DocumentState` and the document store. One engine worker thread (`worker.py`) owns the
backend: it loads it, builds each prompt and runs `backend.complete`. It reports back only through
`loop.call_soon_threadsafe`, and the loop talks to a running generation only through its `CancelToken`.

Structure. `coordinator.py` (`Scheduler`) is the only code that changes state or calls the worker. The
policies are pure functions over a frozen `SchedulingSettings` (`settings.py`) that return decisions:
`answers.py` (answer without a model call: typed ahead of a generation, or a finished suggestion from the
suggestion cache, their one home), `waiting.py` (whole, first-line and mid-line answers), `prefetch.py`,
`warmups.py`. Empty answers say why with an `EmptyReason` (`reasons.py`).

Policy.
- One pending job per document; a newer request replaces it, and the replaced one is answered empty.
  Documents are served in the order their first pending job arrived, so one busy file cannot starve another.
- A newer request or a `didChange` stops the document's running generation, unless the user only typed
  characters that agree with what it generated: then it keeps going and later requests are answered from it.
- Finished suggestions are kept by the text around their cursor: backspace, undo or coming back to a spot
  shows one again, and typing that matches its start is answered at once with the remainder. On divergence
  a new generation starts with the old suggestion as `previous_completion`, which the stale drafter
  re-verifies in one pass.
- Prefetch: when a suggestion is finished and the engine is idle, the next one is computed as if it were
  accepted. Accepting it, or typing it out, is answered from that prefetch; any other edit, or a real
  request, cancels it.
- Every request gets an answer: a suggestion, an empty one, or (after `$/cancelRequest`, done by pygls when
  the awaiting task is cancelled) error -32800.
- While the user is idle the engine warms its KV cache with the prompt the next request will need (on open,
  cursor, save, and after `warmIdleMs`); any real request pre-empts a warm-up, and what it computed stays.
"""

from lsp_server.scheduling.answers import Suggestion
from lsp_server.scheduling.coordinator import Scheduler
from lsp_server.scheduling.prefetch import PREFETCH_MAX_CHARS
from lsp_server.scheduling.reasons import BackendState, EmptyReason

__all__ = ["PREFETCH_MAX_CHARS", "BackendState", "EmptyReason", "Scheduler", "Suggestion"]
