"""The typed-ahead arithmetic: how the user's typing since a request relates to what the model generated.

Pure functions over strings; the scheduler uses them to keep a generation that the typing agrees with and to
answer later requests from it.
"""

from __future__ import annotations


def typed_since(old_text: str, anchor: int, new_text: str) -> str | None:
    """The characters inserted at `anchor` that turn `old_text` into `new_text`; None for any other edit."""
    grown = len(new_text) - len(old_text)
    if grown < 0 or anchor > len(old_text):
        return None
    if new_text[:anchor] != old_text[:anchor] or new_text[anchor + grown :] != old_text[anchor:]:
        return None
    return new_text[anchor : anchor + grown]


def part_typed(assumed_text: str, start: int, inserted: str, text: str) -> int | None:
    """How much of `inserted` the user has typed (or accepted) so far, where `assumed_text` is the document
    with all of `inserted` at `start`: k when `text` is the document with `inserted[:k]` there, else None."""
    typed = len(text) - (len(assumed_text) - len(inserted))
    if not 0 <= typed <= len(inserted):
        return None
    end = start + len(inserted)
    if text[:start] != assumed_text[:start] or text[start + typed :] != assumed_text[end:]:
        return None
    return typed if text[start : start + typed] == inserted[:typed] else None


def remainder_after(suggestion: str, typed: str) -> str | None:
    """What is left of `suggestion` once the user typed `typed`, or None when the typing diverged from it."""
    return suggestion[len(typed) :] if suggestion.startswith(typed) else None


def still_agrees(generated: str, typed: str) -> bool:
    """True while a generation that has produced `generated` so far may still match `typed`."""
    return generated.startswith(typed) or typed.startswith(generated)


def complete_first_line(text: str) -> str | None:
    """`text` up to the first line break that follows some non-blank content; None if no such line yet."""
    seen_content = False
    for index, char in enumerate(text):
        if char == "\n":
            if seen_content:
                return text[:index]
        elif not char.isspace():
            seen_content = True
    return None
