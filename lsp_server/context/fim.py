"""Fill-in-the-middle prompts: templates per model family, a token budget, and a layout that keeps the KV
cache warm.

Layout: other-file snippets first (they change rarely), then the FIM part. The bundled model uses SPM
(suffix, then prefix), so typing at the cursor only changes the end of the prompt. The prefix and suffix are
trimmed at line-block boundaries counted from the file's start (prefix) and end (suffix), so the cut points
do not move while the user types between them: consecutive keystrokes share a long token prefix (the engine
counts what it reuses, `reused_prompt_tokens`; tests/unit/test_context_fim.py checks the layout keeps it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

CountTokens = Callable[[str], int]

# Lines per trimming block: the prefix/suffix cut points move in steps of this many lines.
BLOCK_LINES = 8


@dataclass(frozen=True)
class Snippet:
    path: str  # shown to the model before the text (a workspace-relative path where possible)
    text: str


@dataclass(frozen=True)
class FimTemplate:
    name: str
    prefix_token: str
    suffix_token: str
    middle_token: str
    order: Literal["psm", "spm", "prefix-only"]
    file_sep: str | None  # token that starts an other-file block; None: a comment line names the file
    stop_strings: tuple[str, ...]  # text the model emits at the end of the middle (or when it wanders off)
    # How the three tokens are glued to the text: CodeLlama wants spaces around them.
    pre_gap: str = ""
    mid_gap: str = ""
    # Prefix-only prompts: a line naming the current file before its text ({comment} and {path}), the way
    # code appears in pretraining data; "" for none. Off: on SmolLM2-135M neither "# path" nor
    # "<filename>path" changed the next line's NLL beyond noise (bench/results/prompt-template-*.md).
    file_header: str = ""

    def format(
        self,
        prefix: str,
        suffix: str,
        snippets: Sequence[Snippet] = (),
        comment: str = "#",
        path: str = "",
        name_file: bool = False,
    ) -> str:
        """The full prompt: snippet blocks, then prefix and suffix in this family's order. `name_file`: the
        current file's path after the snippets, as in the family's repository layout, so paths in the snippets
        read relative to it (a relative import)."""
        context = "".join(self.format_snippet(snippet, comment) for snippet in snippets)
        if name_file and path and self.file_sep is not None:
            context += f"{self.file_sep}{path}\n"
        if self.order == "prefix-only":
            header = self.file_header.format(comment=comment, path=path) if path and self.file_header else ""
            return context + header + prefix
        if self.order == "spm":
            return f"{context}{self.suffix_token}{suffix}{self.prefix_token}{prefix}{self.middle_token}"
        # PSM: the cursor's line, up to the cursor, goes after the middle token, as text the middle already
        # holds; the lines above stay in the prefix. Typing on the line then changes only the prompt's end,
        # where plain PSM would re-read the whole suffix after every key (a layout llama.vim uses too).
        above, line_head = split_current_line(prefix)
        pre = f"{self.prefix_token}{self.pre_gap}{above}{self.pre_gap}"
        return f"{context}{pre}{self.suffix_token}{suffix}{self.mid_gap}{self.middle_token}{line_head}"

    def format_snippet(self, snippet: Snippet, comment: str = "#") -> str:
        if self.file_sep is not None:
            return f"{self.file_sep}{snippet.path}\n{snippet.text}\n"
        return f"{comment} {snippet.path}\n{snippet.text}\n"


def split_current_line(prefix: str) -> tuple[str, str]:
    """(the lines before the cursor's line, that line up to the cursor): `prefix` cut after its last line
    break."""
    cut = prefix.rfind("\n") + 1
    return prefix[:cut], prefix[cut:]


BUNDLED = FimTemplate(
    "specls",
    "<|sp_fim_prefix|>",
    "<|sp_fim_suffix|>",
    "<|sp_fim_middle|>",
    "spm",
    "<|sp_file_sep|>",
    ("<|endoftext|>", "<|sp_file_sep|>", "<|sp_fim_prefix|>", "<|sp_fim_suffix|>", "<|sp_fim_middle|>"),
)
QWEN_CODER = FimTemplate(
    "qwen2.5-coder",
    "<|fim_prefix|>",
    "<|fim_suffix|>",
    "<|fim_middle|>",
    "psm",
    "<|file_sep|>",
    ("<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>", "<|im_end|>", "<|fim_prefix|>"),
)
STARCODER2 = FimTemplate(
    "starcoder2",
    "<fim_prefix>",
    "<fim_suffix>",
    "<fim_middle>",
    "psm",
    "<file_sep>",
    ("<|endoftext|>", "<file_sep>", "<fim_prefix>", "<fim_pad>", "<repo_name>"),
)
CODELLAMA = FimTemplate(
    "codellama", "<PRE>", "<SUF>", "<MID>", "psm", None, ("<EOT>", "</s>"), pre_gap=" ", mid_gap=" "
)
DEEPSEEK_CODER = FimTemplate(
    "deepseek-coder",
    "<｜fim▁begin｜>",
    "<｜fim▁hole｜>",
    "<｜fim▁end｜>",
    "psm",
    None,
    ("<｜end▁of▁sentence｜>", "<|EOT|>", "<｜fim▁begin｜>"),
)
PREFIX_ONLY = FimTemplate("prefix-only", "", "", "", "prefix-only", None, ())

FIM_FAMILIES = (BUNDLED, QWEN_CODER, STARCODER2, CODELLAMA, DEEPSEEK_CODER)
# Chat and end-of-turn markers of common model families: text a code suggestion never contains.
CHAT_MARKERS = (
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|end|>",
    "<|user|>",
    "<|assistant|>",
    "<|system|>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<|EOT|>",
    "<｜end▁of▁sentence｜>",
    "<｜begin▁of▁sentence｜>",
)


def marker_texts(special_tokens: Sequence[str] = ()) -> tuple[str, ...]:
    """Every marker that must never reach a suggestion: the FIM families' tokens and file separators, chat
    markers, and the backend tokenizer's own special tokens (given in `special_tokens`). The template in use
    adds its stop strings to the request on its own."""
    seen: dict[str, None] = {}
    for family in FIM_FAMILIES:
        for token in (family.prefix_token, family.suffix_token, family.middle_token, family.file_sep):
            if token:
                seen[token] = None
    seen.update(dict.fromkeys(CHAT_MARKERS))
    seen.update(dict.fromkeys(token for token in special_tokens if len(token.strip()) > 1))
    return tuple(seen)


def detect_fim_template(special_tokens: Sequence[str]) -> FimTemplate | None:
    """The FIM family whose three tokens the tokenizer has, or None (use prefix-only prompts).

    CodeLlama's Hugging Face tokenizer spells its tokens with a SentencePiece space ("▁<PRE>"); the
    template then uses those exact strings so they still tokenize to the special ids.
    """
    tokens = set(special_tokens)
    for family in FIM_FAMILIES:
        names = (family.prefix_token, family.suffix_token, family.middle_token)
        if all(name in tokens for name in names):
            return family
        spaced = ["▁" + name for name in names]
        if all(name in tokens for name in spaced):
            # The SentencePiece space is part of each token, so no extra gaps are glued around them.
            extra_stops = tuple("▁" + stop for stop in family.stop_strings)
            return dataclasses.replace(
                family,
                prefix_token=spaced[0],
                suffix_token=spaced[1],
                middle_token=spaced[2],
                stop_strings=family.stop_strings + extra_stops,
                pre_gap="",
                mid_gap="",
            )
    return None


# -- token budget -------------------------------------------------------------------------------
def _fit_tail(text: str, budget: int, count_tokens: CountTokens) -> str:
    """The longest suffix of `text` (cut anywhere) within `budget` tokens; for one enormous line."""
    lo, hi = 0, len(text)  # number of trailing characters kept
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(text[len(text) - mid :]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return text[len(text) - lo :]


def trim_prefix(
    prefix: str,
    budget: int,
    count_tokens: CountTokens,
    *,
    first_line: int = 0,
    block_lines: int = BLOCK_LINES,
) -> str:
    """Keep the end of `prefix` within `budget` tokens, cut at the start of a line whose number in the file
    (`prefix` starts at line `first_line`) is a multiple of `block_lines`: the cut point stays put while
    text is typed after it. Costs about `budget` tokens of counting, whatever the file size."""
    if budget <= 0:
        return ""
    # Character offsets of the block starts, newest last.
    starts = [0]
    line = first_line
    pos = prefix.find("\n")
    while pos != -1:
        line += 1
        if line % block_lines == 0:
            starts.append(pos + 1)
        pos = prefix.find("\n", pos + 1)
    used = 0
    end = len(prefix)
    kept_from = len(prefix)
    for start in reversed(starts):
        cost = count_tokens(prefix[start:end])
        if used + cost > budget:
            break
        used += cost
        kept_from = end = start
    if kept_from == len(prefix) and prefix:
        # Even the block holding the cursor is too big: keep what fits of it.
        return _fit_tail(prefix[starts[-1] :], budget, count_tokens)
    return prefix[kept_from:]


def trim_suffix(
    suffix: str,
    budget: int,
    count_tokens: CountTokens,
    *,
    lines_after: int = 0,
    block_lines: int = BLOCK_LINES,
) -> str:
    """Keep the start of `suffix` within `budget` tokens, cut at line-block boundaries counted from the end
    of the file (`lines_after` more newlines follow `suffix` there), so the cut stays put while text is
    typed before it."""
    if budget <= 0:
        return ""
    newlines = []
    pos = suffix.find("\n")
    while pos != -1:
        newlines.append(pos)
        pos = suffix.find("\n", pos + 1)
    total_lines = len(newlines)
    # Block ends: just after the newlines whose number, counted from the end, is a multiple of block_lines.
    ends = [nl + 1 for i, nl in enumerate(newlines) if (total_lines - 1 - i + lines_after) % block_lines == 0]
    if not ends or ends[-1] != len(suffix):
        ends.append(len(suffix))
    used = 0
    start = 0
    kept_to = 0
    for end in ends:
        cost = count_tokens(suffix[start:end])
        if used + cost > budget:
            break
        used += cost
        kept_to = start = end
    if kept_to == 0 and suffix:
        # The first block is too big: keep its first line if that fits, else nothing.
        first_line = suffix[: suffix.find("\n") + 1] if "\n" in suffix else suffix
        return first_line if count_tokens(first_line) <= budget else ""
    return suffix[:kept_to]


def fit_prefix_suffix(
    prefix: str,
    suffix: str,
    budget: int,
    prefix_fraction: float,
    count_tokens: CountTokens,
    *,
    first_line: int = 0,
    lines_after: int = 0,
    max_suffix_tokens: int | None = None,
) -> tuple[str, str]:
    """Split `budget` between prefix and suffix. The suffix gets at most its fixed share (and at most
    `max_suffix_tokens`); the prefix gets everything the suffix leaves, so a short suffix never wastes budget.
    (The suffix share does not grow when the prefix is short: it would then change with every keystroke and,
    in SPM, spoil the cache.)"""
    suffix_share = int(budget * (1.0 - prefix_fraction))
    if max_suffix_tokens is not None:
        suffix_share = min(suffix_share, max_suffix_tokens)
    kept_suffix = trim_suffix(suffix, suffix_share, count_tokens, lines_after=lines_after)
    used = count_tokens(kept_suffix) if kept_suffix else 0
    kept_prefix = trim_prefix(prefix, budget - used, count_tokens, first_line=first_line)
    return kept_prefix, kept_suffix
