"""One meaning of "word character" (engine/words.py), and the rules built on it treat a name in any script
like an ASCII one."""

from __future__ import annotations

import string

import pytest

from engine.words import ASCII_WORD_CHARACTERS, NAME, ascii_word, is_word_char, word_start
from lsp_server.context import syntax_context_of
from lsp_server.context.builder import healed_fragment
from lsp_server.context.stops import first_repetition


@pytest.mark.parametrize("character", ["a", "Z", "7", "_", "é", "ß", "数", "я"])
def test_letters_and_digits_of_any_script_are_word_characters(character: str) -> None:
    assert is_word_char(character)


@pytest.mark.parametrize("character", [" ", "\t", "\n", ".", "-", "(", "'", "$", "€"])
def test_spaces_punctuation_and_symbols_are_not(character: str) -> None:
    assert not is_word_char(character)


def test_the_ascii_word_characters_are_letters_digits_and_underscore() -> None:
    assert set(ASCII_WORD_CHARACTERS) == set(string.ascii_letters + string.digits + "_")
    assert ascii_word("total_2") and not ascii_word("naïve") and ascii_word("")


def test_word_start_finds_the_whole_word_in_any_script() -> None:
    assert word_start("x = naïve") == len("x = ")
    assert word_start("print(数据") == len("print(")
    assert word_start("a.b", 1) == 0
    assert word_start("x = ") == len("x = ")


def test_a_name_starts_with_a_letter_or_underscore_and_is_never_a_word_tail() -> None:
    assert NAME.findall("1e9 naïve _x 数据 x2") == ["naïve", "_x", "数据", "x2"]


def test_a_unicode_identifier_is_an_identifier_for_the_draft_labels() -> None:
    assert syntax_context_of("print(total_c") == "identifier"
    assert syntax_context_of("print(naï") == "identifier"
    assert syntax_context_of("print(naï", known_identifiers={"naïve"}) == "known-identifier"
    assert syntax_context_of("x = 12") == "other"  # digits are no name


def test_the_degeneration_guard_reads_names_in_any_script() -> None:
    # The same loop in ASCII and in Chinese names: both are cut at the first repeat.
    ascii_loop = "xy(), xy(), xy(), xy()"
    unicode_loop = "数据(), 数据(), 数据(), 数据()"
    assert first_repetition(ascii_loop, "    ", final=True) == len("xy(), ")
    assert first_repetition(unicode_loop, "    ", final=True) == len("数据(), ")


def test_token_healing_takes_a_whole_word_or_none_of_it() -> None:
    assert healed_fragment("x = total_c") == " total_c"
    assert healed_fragment("x = naïv") == ""  # not "v": never half a word
