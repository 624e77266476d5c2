"""Word characters: the one definition behind every rule that finds where a word or a name starts and ends.

A word character is a letter or a digit of any script, or "_": `str.isalnum`, which is also what `\\w` means in
Python's `re` on text. Python, Rust, Go and JavaScript identifiers may use any letter (`naïve`, `数据`), so a
rule that stopped at ASCII letters would cut such a name in two: a stop rule would see half a name, accept-word
would take half a word, a completion item would replace half of it.

Token healing re-spells the word at the cursor one token at a time, which a tokenizer can do for the ASCII
word characters (`engine.healing.can_spell_words` checks that each is a token of its own), not for every
letter of every script; so it heals a word only when it is all ASCII (`ascii_word`).

Pure Python, no torch: the server's context builder and handlers use it as well as the engine.
"""

from __future__ import annotations

import re

# A name: a word character that is not a digit, then word characters; never the tail of a longer word
# (not the "e9" of "1e9").
NAME = re.compile(r"(?<!\w)[^\W\d]\w*")
ASCII_WORD_CHARACTERS = "".join(chr(code) for code in range(128) if chr(code).isalnum() or code == ord("_"))


def is_word_char(character: str) -> bool:
    """A letter or digit of any script, or "_"."""
    return character.isalnum() or character == "_"


def word_start(text: str, end: int | None = None) -> int:
    """Where the run of word characters that ends at `end` (default: the end of `text`) begins."""
    start = len(text) if end is None else end
    while start > 0 and is_word_char(text[start - 1]):
        start -= 1
    return start


def ascii_word(word: str) -> bool:
    """Whether every character of `word` is an ASCII word character: a word token healing can spell."""
    return all(character in ASCII_WORD_CHARACTERS for character in word)
