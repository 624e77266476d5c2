"""Token healing: which tokens may spell a forced prefix, the row masks, and the fragment the builder heals."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

from engine.api import BackendInfo
from engine.healing import (
    WHITESPACE,
    ForcedPrefix,
    TokenTexts,
    banned_after,
    can_spell_words,
    remaining_after,
)
from lsp_server.context.builder import ContextSettings, build_completion_context, healed_fragment
from lsp_server.documents import DocumentStore

# id: text. 0 is a special token whose text happens to start like code; 7 is a lone UTF-8 byte.
VOCAB = ["<s>", "s", "su", "sub", "subprocess", " sub", "process", "\ufffd", "p", " ", "Test", "sup"]
TEXTS = TokenTexts(VOCAB, excluded_ids=[0])


def ids_of(*texts: str) -> list[int]:
    return sorted(VOCAB.index(text) for text in texts)


def longest_match(vocab: list[str]) -> Callable[[str], list[int]]:
    """A stand-in tokenizer over `vocab` (its first entry special): longest match first."""

    def encode(text: str) -> list[int]:
        ids = []
        while text:
            token = max((t for t in vocab[1:] if text.startswith(t)), key=len)
            ids.append(vocab.index(token))
            text = text[len(token) :]
        return ids

    return encode


encode = longest_match(VOCAB)


def test_allowed_ids_finish_the_text_or_are_a_proper_prefix_of_it() -> None:
    assert TEXTS.allowed_ids("sub").tolist() == ids_of("s", "su", "sub", "subprocess")
    assert TEXTS.allowed_ids(" sub").tolist() == ids_of(" ", " sub")
    assert TEXTS.allowed_ids("process").tolist() == ids_of("p", "process")


def test_a_text_no_token_can_spell_is_an_error() -> None:
    with pytest.raises(ValueError, match="no token"):
        TEXTS.allowed_ids("xyz")
    with pytest.raises(ValueError, match="no token"):
        TEXTS.allowed_ids("<s")  # special tokens never spell text


def test_remaining_after() -> None:
    assert remaining_after("sub", "subprocess") == ""
    assert remaining_after("sub", "su") == "b"
    assert remaining_after("sub", "sup") is None
    assert remaining_after("sub", "") is None


def test_constrain_masks_rows_along_the_drafted_path_until_the_text_is_spelled() -> None:
    forced = ForcedPrefix("subprocess", encode, TEXTS)
    logits = torch.arange(len(VOCAB), dtype=torch.float32).repeat(4, 1)
    path = [VOCAB.index("sub"), VOCAB.index("process"), VOCAB.index("Test")]
    out = forced.constrain(logits, path)
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == ids_of("s", "su", "sub", "subprocess")
    assert torch.isfinite(out[1]).nonzero().flatten().tolist() == ids_of("p", "process")
    assert torch.equal(out[2], logits[2]) and torch.equal(out[3], logits[3])  # spelled: free from here
    assert out[0, VOCAB.index("subprocess")] == logits[0, VOCAB.index("subprocess")]  # values kept
    assert torch.isfinite(logits).all()  # the input is not modified


def test_constrain_stops_at_a_drafted_token_that_does_not_fit() -> None:
    forced = ForcedPrefix("sub", encode, TEXTS)
    logits = torch.zeros(3, len(VOCAB))
    out = forced.constrain(logits, [VOCAB.index("sup"), VOCAB.index("s")])
    assert not torch.isfinite(out[0]).all()
    # Row 1 follows a rejected token: never read, so left alone rather than masked for a wrong state.
    assert torch.equal(out[1], logits[1])


def test_advance_and_lead_ids_follow_the_accepted_tokens() -> None:
    forced = ForcedPrefix(" subprocess", encode, TEXTS)
    assert forced.lead_ids() == [VOCAB.index(" sub"), VOCAB.index("process")]
    forced.advance([VOCAB.index(" ")])  # the target split it otherwise: the rest is spelled afresh
    assert forced.remaining == "subprocess" and forced.lead_ids() == [VOCAB.index("subprocess")]
    forced.advance([VOCAB.index("sub")])
    assert forced.remaining == "process" and forced.lead_ids() == [VOCAB.index("process")]
    with pytest.raises(AssertionError):
        forced.advance([VOCAB.index("Test")])
    forced.advance([VOCAB.index("process")])
    assert not forced.active and forced.lead_ids() == [] and forced.spelled_tokens == 3


def test_spelled_prefix_ignores_later_tokens_and_records_the_overshoot() -> None:
    forced = ForcedPrefix("su", encode, TEXTS)
    assert forced.advance([VOCAB.index("subprocess"), VOCAB.index("Test")]) == 1
    assert forced.overshoot == "bprocess"  # what the last spelling token wrote past the forced text
    assert not forced.active
    logits = torch.zeros(2, len(VOCAB))
    assert forced.constrain(logits) is logits


def test_can_spell_words_needs_every_word_character_alone() -> None:
    assert not can_spell_words(TEXTS)
    import string

    assert not can_spell_words(TokenTexts([*string.ascii_letters, *string.digits, "_", " "]))  # no tab
    assert can_spell_words(TokenTexts([*string.ascii_letters, *string.digits, "_", " ", "\t"]))


# Whitespace healing. 0 is special; 11 is a byte fragment after a space.
WS_VOCAB = ["<s>", " ", "  ", "    ", "     ", " return", "return", "\n", "  \n", "\t", "x", " \ufffd", "   x"]  # fmt: skip
WS_TEXTS = TokenTexts(WS_VOCAB, excluded_ids=[0])


def ws_ids(*texts: str) -> list[int]:
    return sorted(WS_VOCAB.index(text) for text in texts)


def ws_encode(text: str) -> list[int]:
    ids = []
    while text:
        token = max((t for t in WS_VOCAB[1:] if text.startswith(t) and "\ufffd" not in t), key=len)
        ids.append(WS_VOCAB.index(token))
        text = text[len(token) :]
    return ids


def test_a_token_that_runs_past_forced_whitespace_must_continue_with_a_non_space() -> None:
    assert WS_TEXTS.allowed_ids("  ", WHITESPACE).tolist() == ws_ids(" ", "  ")
    # Without the rule, more spaces and a line break would do: that is the doubled indentation it prevents.
    assert WS_TEXTS.allowed_ids("  ").tolist() == ws_ids(" ", "  ", "    ", "     ", "  \n", "   x")
    assert WS_TEXTS.allowed_ids(" ", WHITESPACE).tolist() == ws_ids(" ", " return")


def test_what_may_not_follow_a_forced_text() -> None:
    assert banned_after("    ") == banned_after("\n\t") == WHITESPACE
    # A line break after two blank lines; after fewer the model may still open one (a method ends, one follows).
    assert banned_after("\n\n\n") == banned_after("\n  \n\r\n\n") == "\r\n"
    assert banned_after("\n") == banned_after("\n\n") == banned_after(" sub") == banned_after("") == ""
    # Where no blank line may come (inside a Python bracket), after any line break.
    assert banned_after("\n", blank_line=False) == banned_after("\n\n", blank_line=False) == "\r\n"
    assert (
        banned_after("    ", blank_line=False) == WHITESPACE and banned_after(" sub", blank_line=False) == ""
    )


def test_after_two_blank_lines_the_suggestion_may_indent_but_not_open_a_third() -> None:
    vocab = ["<s>", "\n", "\n\n", "\n  ", "\n\n\n", "  ", "x", "\r\n", "\n\n\n\n"]
    texts = TokenTexts(vocab, excluded_ids=[0])
    banned = banned_after("\n\n\n")
    # A token spelling all of it and more may go on with spaces, not with another line break.
    assert texts.allowed_ids("\n\n\n", banned).tolist() == [1, 2, 4]
    assert texts.allowed_ids("\n\n\n", "").tolist() == [1, 2, 4, 8]
    forced = ForcedPrefix("\n\n\n", longest_match(vocab), texts)
    logits = torch.zeros(2, len(vocab))
    out = forced.constrain(logits, [4])
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == [1, 2, 4]
    # Spelled exactly: the next token may be indentation, a word or the end of text, not a line break.
    assert torch.isfinite(out[1]).nonzero().flatten().tolist() == [0, 5, 6]
    assert forced.advance([4]) == 1 and forced.awaits_next
    with pytest.raises(AssertionError):
        forced.advance([7])
    # After one blank line nothing more is asked of the next token.
    once = ForcedPrefix("\n\n", lambda text: [2], texts)
    once.advance([2])
    assert not once.constraining


def test_without_a_blank_line_a_line_break_is_followed_by_code_or_indentation() -> None:
    vocab = ["<s>", "\n", "\n\n", "\n  ", "\n\n\n", "  ", ")", "\r\n"]
    texts = TokenTexts(vocab, excluded_ids=[0])
    forced = ForcedPrefix("\n", lambda text: [1], texts, blank_line=False)
    logits = torch.zeros(2, len(vocab))
    out = forced.constrain(logits, [1])
    # The line break alone, or with the indentation after it; never a token that opens a blank line.
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == [1, 3]
    assert torch.isfinite(out[1]).nonzero().flatten().tolist() == [0, 5, 6]
    assert ForcedPrefix("\n", lambda text: [1], texts).constrain(logits, [1])[0].isfinite().sum() == 4


def test_a_new_lines_indentation_is_spelled_the_way_the_tokenizer_splits_it_before_a_word() -> None:
    # Like Qwen's pre-tokenizer: a line break alone, the indentation but its last space, the space with the word.
    vocab = ["<s>", "\n", " ", "  ", "   ", "    ", " return", "return", " x", "x", "\n\n"]
    pieces = re.compile(r" ?[a-z]+|\n+| +(?!\S)| +")

    def encode(text: str) -> list[int]:
        return [vocab.index(piece) for piece in pieces.findall(text)]

    texts = TokenTexts(vocab, excluded_ids=[0])
    forced = ForcedPrefix("\n    ", encode, texts)
    assert forced.lead_ids() == [vocab.index("\n"), vocab.index("   "), vocab.index(" ")]
    path = [vocab.index("\n"), vocab.index("   "), vocab.index(" return")]
    out = forced.constrain(torch.zeros(4, len(vocab)), path)
    allowed = [torch.isfinite(row).nonzero().flatten().tolist() for row in out]
    # One spelling up to the last space; then the word's token that carries it (or the space alone).
    assert allowed[:3] == [
        [vocab.index("\n")],
        [vocab.index("   ")],
        sorted(vocab.index(text) for text in (" ", " return", " x")),
    ]
    assert forced.advance(path) == 3 and not forced.active and forced.overshoot == "return"
    # Without a line break (a space and a word fragment) the model still chooses the spelling.
    assert ForcedPrefix(" ret", encode, texts).whitespace_step(" ret") is None
    # A tokenizer that keeps the whole indentation in one token leaves the choice to the model too.
    assert ForcedPrefix("\n\n", encode, texts).whitespace_step("\n\n") is None


def test_after_exactly_spelled_whitespace_the_next_token_may_not_start_with_whitespace() -> None:
    forced = ForcedPrefix("    ", ws_encode, WS_TEXTS)
    logits = torch.zeros(3, len(WS_VOCAB))
    out = forced.constrain(logits, [WS_VOCAB.index("  "), WS_VOCAB.index("  ")])
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == ws_ids(" ", "  ", "    ")
    assert torch.isfinite(out[1]).nonzero().flatten().tolist() == ws_ids(" ", "  ")
    # The special token (end of text) stays allowed: an empty suggestion is a fair answer.
    assert torch.isfinite(out[2]).nonzero().flatten().tolist() == ws_ids("<s>", "return", "x")
    assert forced.advance([WS_VOCAB.index("  "), WS_VOCAB.index("  ")]) == 2
    assert not forced.active and forced.awaits_next and forced.constraining
    with pytest.raises(AssertionError):
        forced.advance([WS_VOCAB.index(" return")])
    assert forced.advance([WS_VOCAB.index("return")]) == 0  # visible text, not part of the spelling
    assert not forced.constraining
    assert forced.constrain(logits) is logits


def test_a_word_fragment_or_an_overshoot_leaves_the_next_token_free() -> None:
    forced = ForcedPrefix("  ", ws_encode, WS_TEXTS)
    forced.advance([WS_VOCAB.index("   x")])
    assert forced.overshoot == " x" and not forced.constraining
    word = ForcedPrefix("    x", ws_encode, WS_TEXTS)
    assert not word.banned_next
    word.advance([WS_VOCAB.index("    "), WS_VOCAB.index("x")])
    assert not word.constraining


@pytest.mark.parametrize(
    ("prefix", "fragment"),
    [
        ("p = sub", " sub"),  # the space a byte-level pre-tokenizer attaches to the word goes with it
        ("self.pro", "pro"),
        ("    return valu", " valu"),
        ("p =  sub", "  sub"),  # every space or tab before the word
        ("def f():\n    ", "\n    "),  # a new line and its indentation: one token ("\n   ") in a BPE
        ("def f():\n\t\tret", "\n\t\tret"),
        ("x = 1\n\n", "\n\n"),
        ("x = 1", " 1"),
        ("def ", " "),
        ("x", ""),  # nothing would be left to prompt with
        ("   foo", ""),
        ("\n   ", ""),
        ("y = " + "a" * 41, ""),  # too long to be worth re-generating
        ("x = é_ab", ""),  # a word with a non-ASCII letter stays whole in the prompt (engine.words)
        ("naïve = ab", " ab"),  # an ASCII word after one is healed as usual
        ("x = 数据", ""),
    ],
)
def test_healed_fragment(prefix: str, fragment: str) -> None:
    assert healed_fragment(prefix) == fragment


SPECIAL_TOKENS = ("<|endoftext|>", "<|sp_fim_prefix|>", "<|sp_fim_suffix|>", "<|sp_fim_middle|>")


@pytest.mark.parametrize(("backend_heals", "setting"), [(True, True), (False, True), (True, False)])
def test_builder_moves_the_fragment_out_of_the_prompt_when_the_backend_heals_and_the_user_agrees(
    backend_heals: bool, setting: bool
) -> None:
    store = DocumentStore()
    text = "import subprocess\n\ndef run(cmd):\n    p = sub\n    return p\n"
    store.open("file:///w/a.py", "python", 1, text)
    cursor = text.index("sub\n") + 3
    info = BackendInfo("fake", "t", None, SPECIAL_TOKENS, 1024, "cpu", token_healing=backend_heals)
    settings = ContextSettings(token_healing=setting)
    ctx = build_completion_context(store, "file:///w/a.py", cursor, info, settings, len)
    healing = backend_heals and setting
    assert ctx.prefix.endswith("p = sub")  # the prefix is the file's; only the prompt leaves the word out
    expected = "p =<|sp_fim_middle|>" if healing else "p = sub<|sp_fim_middle|>"
    assert ctx.prompt.endswith(expected)
    assert ctx.forced_prefix == (" sub" if healing else "")


@pytest.mark.parametrize(
    ("language", "text", "blank_line"),
    [
        ("python", "def run(\n    cmd: str,\n", False),  # a new line at column 0 under an open parameter list
        ("python", "x = f(\n    1,  # (\n    ')',\n", False),  # brackets in comments and strings do not count
        ("python", "def run(cmd):\n    return cmd\n", True),  # every bracket closed
        ("python", "call(\n    1,\n    ", True),  # after indentation no whitespace may follow anyway
        ("javascript", "const a = [\n  1,\n", True),  # other languages' formatters keep blank lines there
    ],
)
def test_no_blank_line_first_on_a_new_line_inside_a_python_bracket(
    language: str, text: str, blank_line: bool
) -> None:
    from engine.api import CompletionRequest
    from lsp_server.config import ServerSettings
    from lsp_server.engine_request import engine_request

    store = DocumentStore()
    store.open("file:///w/a", language, 1, text + "\n)\n")
    info = BackendInfo("fake", "t", None, SPECIAL_TOKENS, 1024, "cpu", token_healing=True)
    ctx = build_completion_context(store, "file:///w/a", len(text), info, ContextSettings(), len)
    assert ctx.forced_prefix.endswith(("\n", " "))
    assert ctx.blank_line is blank_line
    request = engine_request(ctx, ServerSettings(), previous_completion="")
    assert isinstance(request, CompletionRequest) and request.blank_line is blank_line


def test_backends_that_cannot_heal_refuse_a_forced_prefix() -> None:
    from engine.api import CompletionRequest
    from lsp_server.backends.fake import FakeBackend

    backend = FakeBackend([("x", "y")])
    assert not backend.info().token_healing
    with pytest.raises(ValueError, match="cannot force a prefix"):
        backend.complete(CompletionRequest("x = 1\nx", forced_prefix="x"))
    assert backend.complete(CompletionRequest("x = 1\nx")).text == "y"
