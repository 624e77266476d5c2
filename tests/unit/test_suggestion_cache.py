"""The suggestion cache: keyed by the text around the cursor, found again after backspace, and on the way
through a suggestion that the typing agrees with."""

from __future__ import annotations

from lsp_server.suggestion_cache import PREFIX_CHARS, TYPED_AHEAD_CHARS, SuggestionCache

URI = "file:///a.py"
DOC = "def add(a, b):\n    ret\nprint(add(1, 2))\n"
AT = DOC.index("ret") + 3


def test_a_suggestion_is_found_at_its_cursor_and_not_elsewhere() -> None:
    cache = SuggestionCache()
    cache.put(URI, DOC, AT, "urn a + b", 7)
    hit = cache.find(URI, DOC, AT)
    assert hit is not None and (hit.remainder, hit.suggestion_id) == ("urn a + b", "7+0")
    assert cache.find("file:///b.py", DOC, AT) is None
    assert cache.find(URI, DOC, AT - 1) is None  # a cursor before it: nothing was made there
    changed_below = DOC.replace("print(add(1, 2))", "print(add(3, 4))")
    assert cache.find(URI, changed_below, AT) is None  # the text after the cursor is part of the key


def test_typing_that_agrees_is_answered_with_the_rest() -> None:
    cache = SuggestionCache()
    cache.put(URI, DOC, AT, "urn a + b", 7)
    typed = DOC[:AT] + "urn a" + DOC[AT:]
    hit = cache.find(URI, typed, AT + len("urn a"))
    assert hit is not None and (hit.remainder, hit.suggestion_id, hit.typed) == (" + b", "7+5", "urn a")
    other = DOC[:AT] + "urn b" + DOC[AT:]
    assert cache.find(URI, other, AT + len("urn b")) is None  # disagrees
    whole = DOC[:AT] + "urn a + b" + DOC[AT:]
    assert cache.find(URI, whole, AT + len("urn a + b")) is None  # nothing left to show


def test_the_nearest_cursor_wins_and_typing_ahead_has_a_reach() -> None:
    cache = SuggestionCache()
    cache.put(URI, DOC, AT, "urn a + b", 1)
    later = DOC[:AT] + "urn" + DOC[AT:]
    cache.put(URI, later, AT + 3, " a + b  # sum", 2)
    typed = DOC[:AT] + "urn a" + DOC[AT:]
    hit = cache.find(URI, typed, AT + 5)
    assert hit is not None and hit.suggestion.generation_id == 2 and hit.remainder == " + b  # sum"

    long = "x" * (TYPED_AHEAD_CHARS + 1)
    cache.put(URI, DOC, AT, long + "y", 3)
    far = DOC[:AT] + long + DOC[AT:]
    assert cache.find(URI, far, AT + len(long)) is None


def test_only_the_near_text_before_the_cursor_is_in_the_key() -> None:
    cache = SuggestionCache()
    body = "a = 1\n" * (PREFIX_CHARS // 6 + 10) + "b = "
    cache.put(URI, body, len(body), "2", 1)
    edited_far_above = "# note\n" + body[7:]
    assert cache.find(URI, edited_far_above, len(edited_far_above)) is not None


def test_the_least_recently_used_entry_goes_first_and_forget_drops_a_document() -> None:
    cache = SuggestionCache(capacity=2)
    cache.put(URI, "a = ", 4, "1", 1)
    cache.put(URI, "b = ", 4, "2", 2)
    assert cache.find(URI, "a = ", 4) is not None  # now the most recent
    cache.put("file:///b.py", "c = ", 4, "3", 3)
    assert cache.find(URI, "b = ", 4) is None and cache.find(URI, "a = ", 4) is not None
    cache.forget(URI)
    assert len(cache) == 1 and cache.find("file:///b.py", "c = ", 4) is not None


def test_nothing_to_show_is_kept_for_its_own_cursor_only() -> None:
    cache = SuggestionCache()
    cache.put(URI, "d = ", 4, "", 4)  # the gate dropped what the model wrote here
    hit = cache.find(URI, "d = ", 4)
    assert hit is not None and (hit.typed, hit.remainder) == ("", "")
    assert cache.find(URI, "d = 1", 5) is None  # typing on asks the model again
    cache.put(URI, "e = ", 4, "val", 5)
    cache.put(URI, "e = v", 5, "", 6)  # nothing sure after the "v", but the earlier suggestion still fits
    found = cache.find(URI, "e = v", 5)
    assert found is not None and (found.typed, found.remainder) == ("", "")  # the nearest one wins
    assert cache.find(URI, "e = va", 6) is not None and cache.find(URI, "e = va", 6).remainder == "l"
