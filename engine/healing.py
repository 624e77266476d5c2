"""Token healing: let the model re-choose how the word at the cursor is split into tokens.

When the cursor is mid-word, a prompt that ends with the typed fragment ("self.pro") ends in a token split the
model rarely saw in training; it then tends to suggest lone letters instead of finishing the word. So the
fragment is taken out of the prompt and becomes a *forced prefix*: the first generated tokens must spell it
(each one either finishes it or is a prefix of what is left), and it is removed from the completion text.

Spaces, tabs and line breaks before the cursor are healed the same way (a byte-level BPE attaches the last space
to the next word, " return", and a line break to the indentation after it). A forced text that ends in them is
complete: after spaces or tabs the text must go on with something other than whitespace, so the suggestion
neither indents the line twice nor leaves it empty; after two blank lines, with something other than another
line break, so a suggestion there does not begin with a third (`banned_after`). A new line's line break and
indentation are spelled the way the tokenizer splits them before a word, up to the space the word takes: the
model chooses the word, not a split it never saw (`ForcedPrefix.whitespace_step`).

The constraint masks the target's logits, in the plain loop and in the speculative loop alike, so greedy
speculative output stays token-identical to plain greedy decoding under the same constraint, and sampled
output follows the target's constrained distribution.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from engine.words import ASCII_WORD_CHARACTERS

INDENT_CHARACTERS = " \t"
LINE_BREAKS = "\r\n"
WHITESPACE = INDENT_CHARACTERS + LINE_BREAKS


# A letter after whitespace, to ask the tokenizer how it splits whitespace that a word follows.
WORD_AFTER = "x"

# Blank lines in a row that code has at most (PEP 8's two between top-level definitions; other style guides
# allow fewer). After them a suggestion starts with code: on 79 line starts of google/adk-python the 0.5B asked
# for a third blank line at 3, a first line with nothing on it (docs/line-starts.md). After fewer, the model's
# wish for a blank line stands: where a block ends, the right next text often starts with one.
MOST_BLANK_LINES = 2


def banned_after(text: str, blank_line: bool = True) -> str:
    """The characters that may not come right after a forced `text`: any whitespace after a space or tab;
    another line break after MOST_BLANK_LINES blank lines, or after any line break where no `blank_line` may
    come (inside a bracket, `CompletionRequest.blank_line`); none after anything else."""
    last = text[-1:]
    if last and last in INDENT_CHARACTERS:
        return WHITESPACE
    if last == "\n" and (not blank_line or text.count("\n") > MOST_BLANK_LINES):
        return LINE_BREAKS
    return ""


class TokenTexts:
    """The text of every ordinary token, indexed for "which tokens can spell the start of this string"."""

    def __init__(self, texts: Sequence[str], excluded_ids: Iterable[int] = ()) -> None:
        excluded = set(excluded_ids)
        self.texts = list(texts)
        # Special tokens and byte fragments that decode to U+FFFD alone never spell plain text.
        usable = [
            (text, token_id)
            for token_id, text in enumerate(self.texts)
            if text and token_id not in excluded and "\ufffd" not in text
        ]
        usable.sort()
        self._sorted_texts = [text for text, _ in usable]
        self._sorted_ids = [token_id for _, token_id in usable]
        self._ids_by_text: dict[str, list[int]] = {}
        for text, token_id in usable:
            self._ids_by_text.setdefault(text, []).append(token_id)
        self._excluded = excluded
        self._allowed_cache: dict[tuple[str, str], torch.Tensor] = {}
        self._led_cache: dict[str, torch.Tensor] = {}

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> TokenTexts:
        """Token texts from a transformers tokenizer.

        Each token is decoded after a reference token and the reference's text is cut off: decoding a token
        alone drops the leading space of SentencePiece tokens ("▁foo" would read "foo").
        """
        reference = tokenizer.encode("a", add_special_tokens=False)[-1:]
        reference_text = tokenizer.decode(reference)
        pairs = [[*reference, token_id] for token_id in range(len(tokenizer))]
        decoded = tokenizer.batch_decode(pairs, skip_special_tokens=False)
        texts = [text[len(reference_text) :] if text.startswith(reference_text) else "" for text in decoded]
        return cls(texts, excluded_ids=tokenizer.all_special_ids)

    def is_special(self, token_id: int) -> bool:
        """A special token (the end of text, a FIM marker): it never spells code."""
        return token_id in self._excluded

    def has_text(self, text: str) -> bool:
        return text in self._ids_by_text

    def led_ids(self, characters: str) -> torch.Tensor:
        """Ids of tokens whose text starts with one of `characters`, byte fragments included (" \ufffd" still
        starts with a space)."""
        cached = self._led_cache.get(characters)
        if cached is None:
            led = [
                i
                for i, text in enumerate(self.texts)
                if i not in self._excluded and _led_by(text, characters)
            ]
            cached = self._led_cache[characters] = torch.tensor(led, dtype=torch.long)
        return cached

    def allowed_ids(self, remaining: str, banned_next: str = "") -> torch.Tensor:
        """Ids of tokens that may come next while `remaining` is still to be spelled: tokens whose text starts
        with all of it, or whose text is a proper prefix of it. A token that runs past `remaining` may not
        continue with one of `banned_next` (`banned_after`)."""
        key = (remaining, banned_next)
        cached = self._allowed_cache.get(key)
        if cached is not None:
            return cached
        ids: list[int] = []
        start = bisect.bisect_left(self._sorted_texts, remaining)
        for index in range(start, len(self._sorted_texts)):
            text = self._sorted_texts[index]
            if not text.startswith(remaining):
                break
            if not _led_by(text[len(remaining) :], banned_next):
                ids.append(self._sorted_ids[index])
        for length in range(1, len(remaining)):
            ids.extend(self._ids_by_text.get(remaining[:length], ()))
        if not ids:
            raise ValueError(f"no token of the vocabulary can spell {remaining!r}")
        allowed = torch.tensor(sorted(ids), dtype=torch.long)
        if len(self._allowed_cache) > 4096:  # typed fragments repeat; keep the cache bounded all the same
            self._allowed_cache.clear()
        self._allowed_cache[key] = allowed
        return allowed


def _led_by(text: str, characters: str) -> bool:
    return bool(text) and text[0] in characters


def can_spell_words(token_texts: TokenTexts) -> bool:
    """Whether every ASCII word character, the space and the tab are tokens of their own: any healed fragment
    (an ASCII word and the whitespace before it, `engine.words`) can be spelled."""
    return all(token_texts.has_text(character) for character in ASCII_WORD_CHARACTERS + INDENT_CHARACTERS)


def remaining_after(remaining: str, token_text: str) -> str | None:
    """What is left to spell after a token; None when the token does not fit what is left."""
    if token_text.startswith(remaining):
        return ""
    if token_text and remaining.startswith(token_text):
        return remaining[len(token_text) :]
    return None


class ForcedPrefix:
    """One generation's forced prefix: how much of it the accepted tokens have not spelled yet.

    `encode` is the tokenizer: the speculative loop drafts its spelling of what is left, so a target that
    agrees spells the whole fragment in one verify, and one that split it otherwise ("launch" for "la") is
    offered the tokenizer's spelling of the rest in the next.

    A text that ends in whitespace has one more constraint: the first character after it is not one of
    `banned_after(text)`. A token that runs past the text is checked with the text; when the text ends exactly
    at a token boundary, the next token is checked (`awaits_next`).
    """

    def __init__(
        self,
        text: str,
        encode: Callable[[str], list[int]],
        token_texts: TokenTexts,
        blank_line: bool = True,
    ) -> None:
        self.text = text
        self.remaining = text
        self.encode = encode
        self.token_texts = token_texts
        self.banned_next = banned_after(text, blank_line)
        self.awaits_next = False  # the text is spelled exactly; the next token may not start with banned_next
        self.spelled_tokens = 0  # generated tokens that went into spelling the text (hidden from the result)
        self.overshoot = ""  # text of the last spelling token beyond the forced text ("rocess" for " subp")
        self._whitespace_steps: dict[str, int | None] = {}

    @property
    def active(self) -> bool:
        """Still spelling the text."""
        return bool(self.remaining)

    @property
    def constraining(self) -> bool:
        """The next token is still constrained (spelling the text, or the token right after it)."""
        return bool(self.remaining) or self.awaits_next

    def lead_ids(self) -> list[int]:
        """The tokenizer's spelling of what is left, as a draft (empty when nothing is left)."""
        ids, remaining = [], self.remaining
        while (step := self.whitespace_step(remaining)) is not None:
            ids.append(step)
            remaining = remaining[len(self._text(step)) :]
        return ids + (self.encode(remaining) if remaining else [])

    def whitespace_step(self, remaining: str) -> int | None:
        """The one token that may come next while `remaining` starts with whitespace of a new line that the
        tokenizer splits before a word: its first token there, where that ends inside the whitespace (for a line
        break and 12 spaces: "\n", then 11 spaces; the 12th goes with the word, " fence"). None where the model
        chooses the spelling. Left to choose, the 0.5B spelled a deep line's indentation as 7 spaces and then
        single ones, a path it never saw in training, and went on with "1" where `ls.progress_token = token`
        came; spelled the tokenizer's way, it wrote that line."""
        whitespace = remaining[: len(remaining) - len(remaining.lstrip(WHITESPACE))]
        if not whitespace or not any(line_break in self.text for line_break in LINE_BREAKS):  # new lines only
            return None
        if whitespace not in self._whitespace_steps:
            ids = self.encode(whitespace + WORD_AFTER)
            first = self._text(ids[0]) if ids else ""
            inside = bool(first) and len(first) < len(whitespace) and whitespace.startswith(first)
            self._whitespace_steps[whitespace] = ids[0] if inside else None
        return self._whitespace_steps[whitespace]

    def constrain(self, logits: torch.Tensor, path: Sequence[int] = ()) -> torch.Tensor:
        """Mask logits rows [n, vocab] for the positions the constraint still covers.

        Row i is the distribution after `path[:i]` (the drafted tokens, in a verify). Masking walks the path
        and stops at the first drafted token that does not fit: that token is rejected at its row whatever
        comes after, so later rows are never read.
        """
        if not self.constraining:
            return logits
        constrained = logits.clone()
        remaining, awaits_next = self.remaining, self.awaits_next
        for row in range(logits.shape[0]):
            if remaining:
                step = self.whitespace_step(remaining)
                allowed = (
                    torch.tensor([step], dtype=torch.long)
                    if step is not None
                    else self.token_texts.allowed_ids(remaining, self.banned_next)
                ).to(logits.device)
                allowed = allowed[allowed < logits.shape[-1]]
                masked = torch.full_like(constrained[row], float("-inf"))
                masked[allowed] = constrained[row, allowed]
                constrained[row] = masked
                if row >= len(path) or not bool((allowed == path[row]).any()):
                    break
                token_text = self._text(path[row])
                awaits_next = bool(self.banned_next) and token_text == remaining
                remaining = remaining_after(remaining, token_text) or ""
            elif awaits_next:
                banned = self.token_texts.led_ids(self.banned_next).to(logits.device)
                constrained[row, banned[banned < logits.shape[-1]]] = float("-inf")
                break
            else:
                break
        return constrained

    def advance(self, token_ids: Sequence[int]) -> int:
        """Account for tokens the target accepted (each fits, since the target's choice was constrained);
        return how many of them went into the spelling."""
        spelled = 0
        for token_id in token_ids:
            text = self._text(token_id)
            if self.awaits_next:
                if _led_by(text, self.banned_next):
                    raise AssertionError(
                        f"token {token_id} was accepted but starts with one of {self.banned_next!r}"
                    )
                self.awaits_next = False
                break
            if not self.remaining:
                break
            left = remaining_after(self.remaining, text)
            if left is None:
                raise AssertionError(f"token {token_id} was accepted but does not spell {self.remaining!r}")
            if not left:
                self.overshoot = text[len(self.remaining) :]
                self.awaits_next = bool(self.banned_next) and not self.overshoot
            self.remaining = left
            spelled += 1
        self.spelled_tokens += spelled
        return spelled

    def _text(self, token_id: int) -> str:
        texts = self.token_texts.texts
        return texts[token_id] if 0 <= token_id < len(texts) else ""
