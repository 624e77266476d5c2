"""Everything the engine needs for one completion at one cursor: prompt, mode, stop rules, syntax context."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.api import (
    ANY_NAME,
    BackendInfo,
    ExportNames,
    ImportNames,
    StopCheck,
    may_become_from_import,
    may_become_import,
)
from engine.costs import AT_REST_SUGGESTION_S, readable_prompt_tokens
from engine.words import ascii_word, is_word_char, word_start
from lsp_server.context.definitions import bound_names, code_only, in_import_block, without_line_at
from lsp_server.context.fim import (
    BLOCK_LINES,
    PREFIX_ONLY,
    FimTemplate,
    Snippet,
    detect_fim_template,
    fit_prefix_suffix,
    marker_texts,
)
from lsp_server.context.import_blocks import export_list_at, import_block_at, names_for_line
from lsp_server.context.indentation import IndentStyle, indent_style_around, reindent
from lsp_server.context.snippets import display_path, select_snippets, snippet_tokens
from lsp_server.context.stops import SyntaxStopRules, finalize, innermost_open_indent
from lsp_server.context.syntax import Mode, completion_mode, indent_width, literal_kind, opens_block
from lsp_server.context.trees import tree_for_prompt
from lsp_server.context.workspace import binds_on_demand
from lsp_server.languages import language_spec

if TYPE_CHECKING:
    from lsp_server.documents import Document, DocumentStore


@dataclass
class ContextSettings:
    # The prompt's size before a request cuts it to what it reads in time. None: what the machine reads from
    # scratch within the at-rest budget, from 1,536 to 4,096 tokens (`full_prompt_tokens` below).
    max_prompt_tokens: int | None = None
    prefix_fraction: float = 0.75  # of the file's share of the budget; the suffix gets the rest
    # ... but no more than this. None: what the machine re-reads in time at each new line, which in PSM
    # re-reads all of the suffix (`affordable_suffix_tokens` below: 64 on the CPUs measured, 384
    # on a GPU).
    max_suffix_tokens: int | None = None
    max_snippets: int = 3
    suppress_in_comments: bool = False  # True: no suggestions inside comments and docstrings
    suppress_in_strings: bool = True  # no suggestions inside ordinary string literals
    token_healing: bool = True  # re-generate the word at the cursor (when the backend can constrain it)
    max_lines: int = 8
    snippet_fraction: float = 0.25  # of the budget, at most, for other-file snippets
    reserve_tokens: int = 128  # kept free of the model's context length for the completion itself
    tab_size: int = 4
    # "auto": the shape measured best for the model (its catalog entry), else FIM where the tokenizer has
    # FIM tokens; "fim" or "prefix-only" force one (what `specls bench lines --prompt-shape` compares).
    prompt_shape: str = "auto"
    # The gate (`gate.first_line_confidence`): no suggestion whose first line the model gave a lower
    # probability than this (the product of its tokens'); 0 shows everything. None: the threshold measured for
    # the model (`BackendInfo.first_line_gate`: 0.1 for the Qwen2.5-Coder 0.5B, 0.2 for the 1.5B, 0 for any
    # other), fit on held-out line starts (docs/line-starts.md).
    min_first_line_probability: float | None = None
    # Definitions from the workspace files the document imports, read from disk where they are not open
    # (`context.workspace`). Off by default: on 80 line starts of this project's files they lowered the exact
    # next line (0.5B 22% -> 16%, 1.5B 34% -> 32%; bench/results/lines-*-imported-*).
    imported_files: bool = False
    # At a line among a Python file's imports: the first line of each definition the workspace holds for a
    # name the file uses but does not bind, and the file's own path (`context.definitions`).
    import_definitions: bool = True
    # At a line among a Python file's imports: a `from` line the model writes names only modules and names the
    # workspace has (`engine.imports`; the local engine steers, a remote endpoint is not asked to).
    steer_imports: bool = True
    # The lines below the cursor's line, up to this many tokens, as a block before the file's text (Qwen's
    # repository layout, under the file's path), where they stay cached while lines are typed above them; only
    # where the suffix holds fewer (`lines_below_tokens` below). None: what was measured for the model
    # (`BackendInfo.lines_below_tokens`: 320 for the Qwen2.5-Coder 1.5B, whose lines it lifts on a CPU's
    # prompt; 0, none, for any other).
    lines_below_tokens: int | None = None


@dataclass
class CompletionContext:
    prompt: str  # full prompt with the FIM template applied (stable parts first); "" when mode is "none"
    prefix: str  # file text before the cursor (trimmed to the budget)
    suffix: str  # file text after the cursor (trimmed to the budget)
    mode: Mode
    stop_check: StopCheck
    lookup_snippets: tuple[str, ...]  # other-file snippets, also for the engine's n-gram drafter
    stop_strings: tuple[str, ...]
    template: FimTemplate = field(default=PREFIX_ONLY)
    stop_rules: SyntaxStopRules | None = None  # the same object as stop_check, for finalize_completion
    forced_prefix: str = (
        ""  # the spaces and word fragment at the cursor, left out of the prompt (token healing)
    )
    indent_style: IndentStyle = field(default_factory=IndentStyle)  # how the file indents
    why_none: str = ""  # with mode "none": "mid-word" or "in-literal" (a suppressed string or comment)
    import_names: ImportNames | None = None  # at a Python import line: what the workspace has to import
    blank_line: bool = True  # False: no blank line first (inside a Python bracket, `blank_line_fits`)


MAX_HEALED_WORD = 40  # longer runs (minified code, hashes) are not worth re-generating


def healed_fragment(prefix: str) -> str:
    """The end of `prefix` to generate again under a constraint instead of prompting with it ("" for none).

    A prompt that ends mid-word ends on a token split the model rarely saw, and it suggests lone letters
    instead of finishing the word; re-generating the fragment lets it pick the word's usual tokens. The same
    holds for whitespace at the end: a byte-level BPE attaches the last space to the next word (" return")
    and a line break to the indentation after it ("\n   "), so a prompt that ends in a line break or in
    indentation asks for tokens the model rarely saw there, and it answers with stray spaces, an empty line
    or code for column 0. So the word fragment before the cursor and all the whitespace before it (line
    breaks included) leave the prompt together; some text always stays in it. A word with a letter outside
    ASCII stays whole in the prompt: the model could not spell it back (`engine.words`).
    """
    start_of_word = word_start(prefix)
    word = prefix[start_of_word:]
    if len(word) > MAX_HEALED_WORD or not ascii_word(word):
        return ""
    start = len(prefix[:start_of_word].rstrip(" \t\r\n"))
    return prefix[start:] if prefix[:start].strip() else ""


# The prompt's full size, unless `contextTokens` names a number: DEFAULT_PROMPT_TOKENS, or more where the
# machine reads more from scratch and still writes a first line within AT_REST_SUGGESTION_S, up to
# MOST_PROMPT_TOKENS. The CPUs measured read 230-300 tokens in that time, so they keep 1,536 (a request cuts
# it and the full prompt is read aside, `lsp_server.scheduling.budget`); a GPU reads thousands. On 79 line
# starts of openai-agents-python the 1.5B wrote the exact next line at 53% with 4,096 tokens, 49% with 1,536
# (both with a 384-token suffix), and the 0.5B at 39% against 37% (docs/line-starts.md).
DEFAULT_PROMPT_TOKENS = 1536
MOST_PROMPT_TOKENS = 4096


def full_prompt_tokens(info: BackendInfo, configured: int | None) -> int:
    """The prompt's size before any cut for time: `configured` where the user set a number, else what this
    machine reads from scratch within AT_REST_SUGGESTION_S after a first line's steps, from
    DEFAULT_PROMPT_TOKENS to MOST_PROMPT_TOKENS; DEFAULT_PROMPT_TOKENS where nothing was measured (a remote
    endpoint, the fake)."""
    if configured is not None:
        return configured
    if info.prompt_tokens_per_s <= 0:
        return DEFAULT_PROMPT_TOKENS
    affordable = readable_prompt_tokens(info.prompt_tokens_per_s, info.step_s, AT_REST_SUGGESTION_S)
    return max(DEFAULT_PROMPT_TOKENS, min(MOST_PROMPT_TOKENS, affordable))


def prompt_budget(info: BackendInfo, settings: ContextSettings) -> int:
    """Tokens the prompt may use: its full size on this machine (`full_prompt_tokens`), within the model's
    context minus room for the completion."""
    full = full_prompt_tokens(info, settings.max_prompt_tokens)
    return max(0, min(full, info.context_length - settings.reserve_tokens))


MAX_LINE_BEFORE = 4000  # of a longer line, the stop rules see its indentation and its last characters
MAX_CHARS_PER_TOKEN = 12  # no tokenizer packs more on average, so more text than this cannot fit a budget


# The text after the cursor, unless the `suffixTokens` setting names a number: in Qwen's fill-in-the-middle
# layout it follows the lines above the cursor, so every new line re-reads all of it. It gets what the engine
# reads in SUFFIX_READ_S, less than the time between two keys (120 ms), from MIN_SUFFIX_TOKENS to
# MOST_SUFFIX_TOKENS. On the CPUs measured that is the floor: with ~120 tokens (half the at-rest budget's
# reading) the typist saved 13.5-14.3% of characters against 16.1-16.6% with 64, AVX2 and AVX512-BF16 alike,
# for an exact next line within noise for the 0.5B (docs/line-starts.md). Where prompts are read fast (a GPU)
# it is the most: the 1.5B wrote the exact next line at 49% of 79 line starts of unseen code with 384 tokens,
# 42% with 64.
SUFFIX_READ_S = 0.1
MIN_SUFFIX_TOKENS = 64
MOST_SUFFIX_TOKENS = 384


def affordable_suffix_tokens(info: BackendInfo, configured: int | None) -> int:
    """How many tokens after the cursor a prompt holds: `configured` where the user set a number, else what
    this machine reads in SUFFIX_READ_S, from MIN_SUFFIX_TOKENS to MOST_SUFFIX_TOKENS. Where nothing was
    measured (a remote endpoint, which may be a laptop's llama-server, or the fake), MIN_SUFFIX_TOKENS."""
    if configured is not None:
        return configured
    if info.prompt_tokens_per_s <= 0:
        return MIN_SUFFIX_TOKENS
    affordable = int(info.prompt_tokens_per_s * SUFFIX_READ_S)
    return max(MIN_SUFFIX_TOKENS, min(MOST_SUFFIX_TOKENS, affordable))


# The lines below the cursor again, ahead of the prefix (`linesBelowTokens`): the suffix a CPU re-reads at each
# new line holds 64 tokens, and the 1.5B writes better lines with 384 (above). Ahead of the prefix they are read
# once per place in the file, not once per line. With 320 tokens there and a CPU's prompt, on 240 line starts
# each of google/adk-python, openai-agents-python and this project's files: the 1.5B 48.1% -> 55.3%, 45.0% ->
# 50.0% and 25.1% -> 28.5% exact next line, so it is the 1.5B's default (`engine.catalog_entries`); the 0.5B
# gained nothing (docs/line-starts.md).
LINES_BELOW_SHARE = 0.25  # of the prompt's budget at most: a prompt cut for time holds none


def lines_below_tokens(info: BackendInfo, configured: int | None, suffix_tokens: int, budget: int) -> int:
    """How many tokens of the lines below the cursor go ahead of the prefix: `configured` where the user set a
    number, else the model's measured one, where the suffix holds fewer and the block fits in
    LINES_BELOW_SHARE of `budget`; else none."""
    wanted = configured if configured is not None else info.lines_below_tokens
    return wanted if suffix_tokens < wanted <= budget * LINES_BELOW_SHARE else 0


def gate_threshold(info: BackendInfo, configured: float | None) -> float:
    """The confidence gate's threshold: `configured` where the user set one, else the model's measured one."""
    return configured if configured is not None else info.first_line_gate


def bounded_line_before(text: str, offset: int) -> str:
    """The cursor's line up to the cursor, bounded: a 2 MB minified line keeps its indentation and the last
    MAX_LINE_BEFORE characters, so the stop rules cost the same on any line."""
    start = text.rfind("\n", 0, offset) + 1  # a reverse byte scan: fast on any line
    if offset - start <= MAX_LINE_BEFORE:
        return text[start:offset]
    line_before = text[start : start + 200] + text[offset - MAX_LINE_BEFORE : offset]
    indent = line_before[: len(line_before) - len(line_before.lstrip(" \t"))][:200]
    return indent + line_before[200:].lstrip(" \t")


def block_indent_at(doc_text: str, offset: int, line_before: str, tab_size: int) -> int:
    """Lines of the completion indented less than this end the cursor's block."""
    if line_before.strip():
        # Code before the cursor: the body of a block it opens is deeper than the line itself.
        return indent_width(line_before, tab_size) + 1
    if line_before:
        return indent_width(line_before, tab_size)
    # Column 0 of an empty line: the block the surrounding lines are in, as far as both agree.
    line_start = offset - len(line_before)
    previous = _nearest_code_line(doc_text[max(0, line_start - 4000) : line_start].split("\n")[::-1])
    following = _nearest_code_line(doc_text[offset : offset + 4000].split("\n")[1:])
    from_previous = 0
    if previous is not None:
        from_previous = indent_width(previous, tab_size) + (1 if opens_block(previous) else 0)
    from_following = indent_width(following, tab_size) if following is not None else 0
    return min(from_previous, from_following)


# A prefix that must move starts where it fills this share of its budget: it then grows for a quarter of
# the budget before it has to move again.
STICKY_FILL = 0.75


def _splits_word(text: str, offset: int) -> bool:
    return 0 < offset < len(text) and is_word_char(text[offset]) and is_word_char(text[offset - 1])


def _nearest_code_line(lines: list[str]) -> str | None:
    return next((line for line in lines if line.strip()), None)


PROMPT_SHAPES = ("auto", "fim", "prefix-only")


def choose_template(info: BackendInfo, requested: str = "auto") -> FimTemplate:
    """The prompt template: a requested shape wins, then the model's measured one, then the tokens it has.
    A FIM shape on a tokenizer without FIM tokens falls back to prefix-only (there is nothing to fill with)."""
    shape = requested if requested != "auto" else info.prompt_shape
    if shape == "prefix-only":
        return PREFIX_ONLY
    return detect_fim_template(info.special_tokens) or PREFIX_ONLY


def build_completion_context(
    store: DocumentStore,
    uri: str,
    offset: int,
    info: BackendInfo,
    settings: ContextSettings,
    count_tokens: Callable[[str], int],
) -> CompletionContext:
    """Assemble the completion context for the cursor at character `offset` of document `uri`."""
    doc = store.get(uri)
    text = doc.text
    if not 0 <= offset <= len(text):
        raise ValueError(f"offset {offset} is outside {uri} (length {len(text)})")
    spec = language_spec(doc.language)
    line_before = bounded_line_before(text, offset)
    tree = tree_for_prompt(doc, offset)  # no parse of a huge minified line: it held up every request
    mode = completion_mode(
        text,
        offset,
        tree=tree,
        byte_offset=doc.byte_offset(offset) if tree is not None else None,
        language=doc.language,
        suppress_in_comments=settings.suppress_in_comments,
        suppress_in_strings=settings.suppress_in_strings,
    )
    template = choose_template(info, settings.prompt_shape)
    rules = SyntaxStopRules(
        mode=mode,
        line_before=line_before,
        suffix=text[offset : offset + 4000],
        prefix=recent_lines(text, offset),
        block_indent=block_indent_at(text, offset, line_before, settings.tab_size),
        indent_blocks=spec.indent_blocks if spec else False,
        max_lines=settings.max_lines,
        line_comment=spec.line_comment if spec else "",
        tab_size=settings.tab_size,
        markers=marker_texts(info.special_tokens),
        literal=literal_kind(
            text,
            offset,
            tree=tree,
            byte_offset=doc.byte_offset(offset) if tree is not None else None,
            language=doc.language,
        )
        if mode != "none"
        else None,
        min_first_line_probability=gate_threshold(info, settings.min_first_line_probability),
    )
    style = indent_style_around(text, offset)
    if mode == "none":
        return CompletionContext(
            "",
            "",
            "",
            mode,
            rules,
            (),
            template.stop_strings,
            template,
            rules,
            "",
            style,
            "mid-word" if _splits_word(text, offset) else "in-literal",
        )

    budget = prompt_budget(info, settings)
    snippet_budget = int(budget * settings.snippet_fraction)
    others = store.all_documents()
    if settings.imported_files and store.workspace is not None:
        others += store.workspace.imported_documents(doc, [other.uri for other in others])
    # Among a Python file's imports, in code, with a workspace to read: where the workspace's definitions and
    # the import-line steering apply.
    at_imports = (
        rules.literal is None
        and doc.language == "python"
        and store.workspace is not None
        and (settings.import_definitions or settings.steer_imports)
        and in_import_block(text, offset)
    )
    path, definitions, used = _import_definitions(
        store, doc, offset, settings, at_imports, snippet_budget, count_tokens
    )
    snippets = definitions + select_snippets(
        doc,
        offset,
        others,
        max_snippets=settings.max_snippets,
        budget_tokens=snippet_budget - used,
        count_tokens=count_tokens,
    )
    name_file = bool(definitions)
    comment = spec.line_comment if spec else "#"
    suffix_tokens = affordable_suffix_tokens(info, settings.max_suffix_tokens)
    below_tokens = lines_below_tokens(info, settings.lines_below_tokens, suffix_tokens, budget)
    if template.order == "psm" and template.file_sep is not None and below_tokens:
        below = lines_below(doc, offset, below_tokens, count_tokens)
        if below:
            snippets.append(Snippet(path, below))
    head = template.format("", "", snippets, comment, path, name_file)
    file_budget = budget - (count_tokens(head) if head else 0)
    prefix, suffix = _fit_file_text(doc, offset, file_budget, suffix_tokens, template, settings, count_tokens)
    prompt = template.format(prefix, suffix, snippets, comment, path, name_file)
    # Block boundaries are estimated per block; trim a block more in the rare case the joins add tokens.
    while count_tokens(prompt) > budget and prefix:
        prefix = prefix[prefix.find("\n") + 1 :] if "\n" in prefix else ""
        prompt = template.format(prefix, suffix, snippets, comment, path, name_file)

    fragment = healed_fragment(prefix) if info.token_healing and settings.token_healing else ""
    if fragment:
        prompt = template.format(prefix[: -len(fragment)], suffix, snippets, comment, path, name_file)
    known = _workspace_modules(store, doc, settings, at_imports)
    if known is not None:
        rules.later_imports = ImportNames("", *known)
    return CompletionContext(
        prompt=prompt,
        prefix=prefix,
        suffix=suffix,
        mode=mode,
        stop_check=rules,
        lookup_snippets=tuple(snippet.text for snippet in snippets),
        stop_strings=template.stop_strings,
        template=template,
        stop_rules=rules,
        forced_prefix=fragment,
        indent_style=style,
        import_names=_name_list_names(store, doc, offset, line_before, settings, rules)
        or _import_names(store, doc, offset, line_before, known),
        blank_line=blank_line_fits(doc.language, fragment, rules),
    )


def recent_lines(text: str, offset: int, most_chars: int = 4000) -> str:
    """The text before `offset`, its last `most_chars` characters at most, from the start of a line."""
    start = max(0, offset - most_chars)
    if start:
        start = text.find("\n", start, offset) + 1 or offset
    return text[start:offset]


def blank_line_fits(language: str | None, forced_prefix: str, rules: SyntaxStopRules) -> bool:
    """Whether a suggestion may start with a blank line. Not on a new line inside a bracket of Python, whose
    formatters keep no blank line there: the 0.5B asked for one under an open parameter list (two blank lines
    and a comment where `) -> TrainResult:` came), an empty first line at 3 of 714 line starts
    (docs/line-starts.md). Only a forced prefix that ends in a line break can be followed by one (after
    indentation no whitespace may follow, `engine.healing.banned_after`)."""
    if language != "python" or not forced_prefix.endswith("\n"):
        return True
    return innermost_open_indent(rules.prefix, rules.line_comment, rules.tab_size) is None


def _workspace_modules(
    store: DocumentStore, doc: Document, settings: ContextSettings, at_imports: bool
) -> tuple[dict[str, frozenset[str]], int] | None:
    """What each module a `from` line of `doc` could spell binds, and how many leading dots a relative one
    may have, at a line among a Python file's imports with import steering on; None elsewhere."""
    if not (at_imports and settings.steer_imports and store.workspace is not None):
        return None
    return store.workspace.import_names(doc)


def _import_names(
    store: DocumentStore,
    doc: Document,
    offset: int,
    line_before: str,
    known: tuple[dict[str, frozenset[str]], int] | None,
) -> ImportNames | None:
    """What a `from` line at the cursor may import (`known`), and what the file uses without importing it yet,
    at a line among the imports that may still become a `from` import, or an `import` of a standard module
    the file uses whole; None elsewhere."""
    if known is None or store.workspace is None:
        return None
    from_line = may_become_from_import(line_before)
    if not (from_line or may_become_import(line_before)):
        return None
    modules, relative_depth = known
    wanted, elsewhere = store.workspace.wanted_imports(doc, offset)
    whole = store.workspace.wanted_modules(doc, offset, elsewhere)
    if not (from_line or whole):
        return None
    return ImportNames(line_before, modules, relative_depth, wanted, elsewhere - whole, whole)


def _name_list_names(
    store: DocumentStore,
    doc: Document,
    offset: int,
    line_before: str,
    settings: ContextSettings,
    rules: SyntaxStopRules,
) -> ImportNames | None:
    """At a line among the names of a Python `from M import (` block or the strings of `__all__`, outside a
    string and with import steering on: what the line may name; None elsewhere."""
    if not (doc.language == "python" and rules.literal is None and settings.steer_imports):
        return None
    return _import_block_names(store, doc, offset, line_before) or _export_names(
        store, doc, offset, line_before
    )


def _import_block_names(
    store: DocumentStore, doc: Document, offset: int, line_before: str
) -> ImportNames | None:
    """At a line among the names of a `from M import (` block: the line is steered as the block's own line
    would be (`from M import (` and the line so far), to the names of M that it may still import
    (`import_blocks.names_for_line`); None elsewhere, where M is outside what the workspace enumerated, and
    where no name is left."""
    if store.workspace is None:
        return None
    block = import_block_at(doc.text, offset)
    if block is None:
        return None
    known = store.workspace.import_names(doc)
    if known is None:
        return None
    modules, relative_depth = known
    bound = modules.get(block.module)
    if bound is None or ANY_NAME in bound:
        return None
    allowed = names_for_line(bound, block)
    if not allowed:
        return None
    return ImportNames(f"from {block.module} import (" + line_before, {block.module: allowed}, relative_depth)


def _export_names(store: DocumentStore, doc: Document, offset: int, line_before: str) -> ImportNames | None:
    """At a line among the strings of a module's `__all__` list: the names the line may list
    (`import_blocks.names_for_line`), of those the file binds, the cursor's line left out, and a package's
    submodules; None elsewhere, where the module makes names on demand, where a package's submodules are
    unknown (no workspace folder holds it), and where no name is left."""
    listing = export_list_at(doc.text, offset)
    if listing is None:
        return None
    code = code_only(without_line_at(doc.text, offset))
    if binds_on_demand(code):
        return None
    is_package = doc.uri.endswith("/__init__.py")
    submodules = store.workspace.submodules(doc) if store.workspace is not None else None
    if submodules is None and is_package:
        return None
    bound = frozenset(bound_names(code) | (submodules or frozenset())) - {"__all__"}
    allowed = names_for_line(bound, listing)
    if not allowed:
        return None
    exports = ExportNames(allowed, listing.quote, comma_due=bool(listing.below) or listing.commas)
    return ImportNames(line_before, {}, exports=exports)


# The block of the lines below keeps its first line while the cursor is at most this many lines above it: a
# prompt for a line start a little higher up (a growth read aside for the line where typing began, a warm-up)
# then shares the block and all the cached prompt after it. Those lines are in the suffix (64 tokens, ~6 lines).
# In one AVX2 replay with the block, the growths read aside lost what they had read 47 times without this and
# 11 times with it (2 once snapshots gave back only the starts they moved; 8 with no block; docs/line-starts.md).
BELOW_STICKY_LINES = 4


def lines_below(doc: Document, offset: int, budget: int, count_tokens: Callable[[str], int]) -> str:
    """The whole lines below the cursor's line that fit in `budget` tokens; "" where the first does not. They
    start at the next line, or where the last block started while that is at most BELOW_STICKY_LINES lines
    further down (`Document.below_start_from_end`), so typing on the cursor's line, opening a new one above them
    or a prompt for a line just above keeps them."""
    line = doc.line_of(offset)
    kept = doc.line_count - doc.below_start_from_end if doc.below_start_from_end is not None else None
    first = kept if kept is not None and line < kept <= line + 1 + BELOW_STICKY_LINES else line + 1
    if first >= doc.line_count:
        return ""
    doc.below_start_from_end = doc.line_count - first
    start = doc.line_start(first)
    lines = doc.text[start : start + budget * MAX_CHARS_PER_TOKEN].splitlines(keepends=True)
    # The most whole lines that fit, by bisection: a handful of encodes instead of one per line.
    fitting, too_many = 0, len(lines) + 1
    while too_many - fitting > 1:
        middle = (fitting + too_many) // 2
        if count_tokens("".join(lines[:middle])) <= budget:
            fitting = middle
        else:
            too_many = middle
    return "".join(lines[:fitting]).rstrip("\r\n")


def _import_definitions(
    store: DocumentStore,
    doc: Document,
    offset: int,
    settings: ContextSettings,
    at_imports: bool,
    budget: int,
    count_tokens: Callable[[str], int],
) -> tuple[str, list[Snippet], int]:
    """(the file's path, the workspace's definitions of the names it uses, the tokens they take) at a line
    of code among a Python file's imports, the leading ones that fit in `budget` tokens; else (the short
    display path, [], 0)."""
    nothing: tuple[str, list[Snippet], int] = (display_path(doc.uri), [], 0)
    if not (at_imports and settings.import_definitions and store.workspace is not None):
        return nothing
    path, found = store.workspace.definition_snippets(doc, offset)
    kept: list[Snippet] = []
    used = 0
    for snippet_path, text in found:
        cost = snippet_tokens(text, count_tokens)
        if used + cost > budget:
            break
        kept.append(Snippet(snippet_path, text))
        used += cost
    return (path, kept, used) if kept else nothing


def _fit_file_text(
    doc: Document,
    offset: int,
    budget: int,
    suffix_tokens: int,
    template: FimTemplate,
    settings: ContextSettings,
    count_tokens: Callable[[str], int],
) -> tuple[str, str]:
    """Prefix and suffix within `budget` (the suffix within `suffix_tokens` too), looking at no more lines than
    could possibly fit (a line costs at least one token), so a multi-megabyte file costs no more than a small
    one."""
    line = doc.line_of(offset)
    reach = max(budget, 0) + BLOCK_LINES
    first_line = max(0, line - reach)
    last_line = min(doc.line_count - 1, line + reach)
    # Long lines: no more characters than the budget could hold, so a 2 MB line is never tokenized whole.
    most_chars = (max(budget, 0) + BLOCK_LINES) * MAX_CHARS_PER_TOKEN
    # Cuts fall on a line start where one is in reach, else on a multiple of 4096 inside the huge line, so
    # the prompt's ends stay put while the user types and a prefix-reusing cache keeps them.
    prefix_start = doc.line_start(first_line)
    if offset - prefix_start > most_chars:
        cut = offset - most_chars
        after_cut = doc.line_of(cut) + 1
        prefix_start = doc.line_start(after_cut) if after_cut <= line else cut + (-cut % 4096)
        first_line = doc.line_of(prefix_start)
    prefix_window = doc.text[prefix_start:offset]
    suffix_end = doc.line_start(last_line + 1) if last_line + 1 < doc.line_count else len(doc.text)
    if suffix_end - offset > most_chars:
        cut = offset + most_chars
        cut_line = doc.line_of(cut)
        if cut_line > line:  # the window ends where line cut_line starts
            suffix_end, last_line = doc.line_start(cut_line), cut_line - 1
        else:
            suffix_end, last_line = max(offset, cut - cut % 4096), line
    suffix_window = doc.text[offset:suffix_end]
    lines_after = max(0, doc.line_count - 2 - last_line)  # newlines after the window
    if template.order == "prefix-only":
        fraction, suffix_window = 1.0, ""
    else:
        fraction = settings.prefix_fraction
    prefix, suffix = fit_prefix_suffix(
        prefix_window,
        suffix_window,
        budget,
        fraction,
        count_tokens,
        first_line=first_line,
        lines_after=lines_after,
        max_suffix_tokens=suffix_tokens,
    )
    if len(prefix) == len(prefix_window) and first_line == 0:
        doc.prompt_start_line = 0  # the whole file before the cursor fits
        return prefix, suffix
    # The prefix starts at the last prompt's start while that still fits; when it does not, it moves down
    # far enough to leave a quarter of the budget free, so the start (and the KV cache) rarely moves.
    suffix_tokens = count_tokens(suffix) if suffix else 0
    sticky = doc.prompt_start_line
    if sticky is not None and first_line <= sticky <= line:
        kept = doc.text[doc.line_start(sticky) : offset]
        # (Far more characters than tokens could fit is not worth counting.)
        if len(kept) <= 8 * budget and count_tokens(kept) <= budget - suffix_tokens:
            return kept, suffix
    roomy, _ = fit_prefix_suffix(
        prefix_window,
        "",
        int((budget - suffix_tokens) * STICKY_FILL),
        1.0,
        count_tokens,
        first_line=first_line,
    )
    doc.prompt_start_line = doc.line_of(offset - len(roomy))
    return roomy, suffix


def finalize_completion(text: str, ctx: CompletionContext) -> str:
    """The completion as it should be inserted: stop rules applied to the finished text, trailing
    whitespace trimmed, indented as the file is (`indentation.reindent`)."""
    text = finalize(text, ctx.stop_rules)
    if ctx.stop_rules is None or not text:
        return text
    return reindent(text, ctx.stop_rules.line_before, ctx.indent_style, ctx.stop_rules.tab_size)
