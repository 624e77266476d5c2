"""Import lines that name what exists: a `from M import N` line is steered to modules and names the workspace has.

An import line names a module of the project and what it defines, and neither is in the file being written; a
small model guesses a plausible spelling (`LLMAgent` for `LlmAgent`, `.gcp_code_executor` for a module that
does not exist), and the line is wrong however good the rest of the suggestion. The server knows the answer's
space (`ImportNames`: each module a line could spell, the names importable from it), so:

- `import_line_fits` (pure) says whether a line, as written so far, can still become a `from` import of a
  module the workspace has, naming only what that module binds. A line that is not a `from` import, or whose
  module is outside what the server enumerated (the standard library, installed packages), always fits.
- `ImportLineConstraint` masks the target's logits like token healing's constraint (`engine.healing`): at each
  row, the STEERED_CANDIDATES best tokens are checked, and where some break the line only those that fit stay,
  so a greedy pick is the best-scored token that fits and a sampled one is drawn among them. It applies in the
  plain loop and in the speculative loop alike, so greedy speculative output stays token-identical to plain
  greedy decoding under the same constraint, and sampled output follows the constrained distribution. Where
  no checked token fits, the row is left as it is (the model has something else in mind).
- The missing import (`wanted_import_fits`): where the file uses names it does not bind yet, a `from` line is
  steered first to importing one of them, from a module of the workspace that binds it, or, for a name no
  file of the workspace defines, from a module the server did not enumerate. Where the file uses a standard
  module whole (`copy.deepcopy` without `import copy`), the line is steered from its first token to `import`
  it. Where none of a row's best tokens leads there, the row is steered as above: a user importing something
  else is followed.
- Whatever the module, a `from` line may not end where no statement ends (`from typing import`): the end of
  text ends the line too.
- A line among the strings of `__all__` (`ImportNames.exports`, `export_line_fits`) lists only names the module
  binds and has not listed, quoted as the list quotes them, with the comma the list needs.

Only the cursor's first line is steered; the constraint ends at its line break.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from engine.api import ANY_NAME, ExportNames, ImportNames, may_become_from_import, may_become_import

# The line rules are pure: the stop rules (`lsp_server.context.stops`) use them without loading torch.
if TYPE_CHECKING:
    import torch

    from engine.healing import TokenTexts

# Tokens checked per row, best first: a greedy pick is the best of these that fits. A name the model scores
# below them is not one it would write.
STEERED_CANDIDATES = 64

_FROM = re.compile(r"[ \t]*from(?P<gap>[ \t]+)(?P<module>[\w.]*)(?P<rest>.*)", re.DOTALL)
_IMPORT_LINE = re.compile(r"[ \t]*import(?P<clause>.*)", re.DOTALL)
_IMPORT_KEYWORD = re.compile(r"(?P<gap>[ \t]+)(?P<keyword>\w*)(?P<clause>.*)", re.DOTALL)
_WORD_AT_END = re.compile(r"\w+$")
_AWAITING_NAME = re.compile(r"[ \t]+import[ \t]*\((?:[^)#]*,)?[ \t]*")  # `import (`, `import (a, `
_STATEMENT_END = re.compile(r"[#;]")  # a comment or a second statement: the names before it are complete

LineRule = Callable[[str, ImportNames, bool], bool]  # (line so far, what it may import, whether it ended)


def import_line_fits(line: str, names: ImportNames, ended: bool) -> bool:
    """Whether `line` (the cursor's line as written so far; `ended`: its line break came) can still become a
    `from` import of a module in `names.modules` naming only what that module binds (each name followed by
    nothing, `as alias`, a comma, a comment or a line continuation). A line that is not a `from` import fits;
    one from a module outside what was enumerated (the standard library, installed packages) is held only to
    the statement's form: `from typing import` ends no statement, whatever `typing` binds. At a line of
    `__all__` (`names.exports`), `export_line_fits` judges instead."""
    if names.exports is not None:
        return export_line_fits(line, names.exports, ended)
    match = _FROM.fullmatch(line)
    if match is None:
        return True
    module, rest = match["module"], match["rest"]
    if not _judged(module, names):
        return _statement_form_fits(rest, ended)
    if not rest and not ended:  # the module is being spelled
        return any(known.startswith(module) for known in names.modules)
    if module not in names.modules:
        return False
    clause = _names_clause(rest, ended)
    if isinstance(clause, bool):
        return clause
    return _clause_fits(clause, names.modules[module], ended)


def export_line_fits(line: str, exports: ExportNames, ended: bool) -> bool:
    """Whether `line` (indentation, then what is written so far) can still become, or is, a line of `__all__`
    entries: names of `exports.names`, each once, quoted with `exports.quote`, separated by commas, a comment
    at the end at most; the last name may still be being spelled. An ended line lists a name, and its comma
    where one is due."""
    body = line.lstrip(" \t")
    comment = body.find("#")
    if comment != -1:
        body, ended = body[:comment].rstrip(" \t"), True
    quote = exports.quote
    named: set[str] = set()
    rest = body
    while True:
        if not rest:  # the line start: an entry is due
            return not ended
        if rest[0] != quote:
            return False
        close = rest.find(quote, 1)
        if close == -1:  # a name being spelled
            spelled = rest[1:]
            return not ended and any(n.startswith(spelled) and n not in named for n in exports.names)
        name = rest[1:close]
        if name in named or name not in exports.names:
            return False
        named.add(name)
        after = rest[close + 1 :].lstrip(" \t")
        if not after:
            return not ended or not exports.comma_due
        if after[0] != ",":
            return False
        rest = after[1:].lstrip(" \t")
        if not rest:
            return True


def export_endings(line: str, exports: ExportNames) -> list[str]:
    """What would finish the entry `line` is writing: where only indentation is written, each name whole
    (quoted, with its comma); inside an open quote, the rest of each name it begins."""
    body = line.lstrip(" \t")
    quote = exports.quote
    if not body:
        return [f"{quote}{name}{quote}," for name in sorted(exports.names)]
    if body[0] != quote or quote in body[1:] or "," in body:
        return []
    spelled = body[1:]
    return [
        name[len(spelled) :] for name in sorted(exports.names) if name.startswith(spelled) and name != spelled
    ]


def wanted_import_fits(line: str, names: ImportNames, ended: bool) -> bool:
    """Whether `line` can still become a `from` import of a name the file uses but does not bind
    (`ImportNames.wanted`: from a module of the workspace that binds it; `wanted_elsewhere`: from a module the
    server did not enumerate), or, where the file uses a standard module whole (`ImportNames.wanted_modules`),
    an `import` of one of them. Other lines are not judged, unless such a module is wanted: then they are no
    way there."""
    if names.wanted_modules:
        whole = _whole_module_fits(line, names, ended)
        if whole is not None:
            return whole
    match = _FROM.fullmatch(line)
    if match is None:
        return True
    module, rest = match["module"], match["rest"]
    if not rest and not ended:  # the module is being spelled
        if module[:1] != "." and names.wanted_elsewhere:
            return True  # it may be on its way out of the workspace
        return any(known.startswith(module) for known in names.wanted)
    if module in names.wanted:
        bound = names.wanted[module]
    elif module[:1] == "." or not names.wanted_elsewhere:
        return False
    elif _workspace_package(module, names):
        return True  # a workspace module, while names come from elsewhere: left to the broader rule
    else:
        bound = names.wanted_elsewhere
    clause = _names_clause(rest, ended)
    if isinstance(clause, bool):
        return clause
    if "  " in clause or any(mark in clause for mark in "*(\\"):  # a name at once, spelled plainly
        return False
    items = clause.split(",")
    if items[-1] and not items[-1].strip():  # the token that brings a name's space begins it: ` copy`, never
        return False  # ` ` then `copy` (after a lone space the model is off its own spelling)
    if len(items) > 1 and not items[-1].strip() and bound <= _complete_names(items[:-1]):
        return False  # a comma with no missing name left to follow it: the line ends here instead
    return _clause_fits(clause, bound, ended)


def _statement_form_fits(rest: str, ended: bool) -> bool:
    """Whether `rest` (what follows a `from` line's module, the module not judged) can still be, or is, a
    statement's `import` and names, any names."""
    if not rest and not ended:  # the module is being spelled
        return True
    clause = _names_clause(rest, ended)
    if isinstance(clause, bool):
        return clause
    return _clause_fits(clause, frozenset({ANY_NAME}), ended)


def _whole_module_fits(line: str, names: ImportNames, ended: bool) -> bool | None:
    """Where the file uses a standard module whole: whether `line` can still become `import` of one of them, or
    begin a `from` line while other names are missing; None for a `from` line (the `from` rules judge it)."""
    if _FROM.fullmatch(line) is not None:
        return None
    word = line.lstrip(" \t")
    if not ended and word and "from".startswith(word):
        return bool(names.wanted or names.wanted_elsewhere)
    if not ended and "import".startswith(word):
        return True
    statement = _IMPORT_LINE.fullmatch(line)
    if statement is None:
        return False  # a blank line or another statement, where an import is missing
    clause = statement["clause"]
    if clause[:1] not in (" ", "\t") or not clause.strip():  # `importx`; a lone space (see the `from` rule)
        return False
    return _clause_fits(clause, names.wanted_modules, ended)


def _names_clause(rest: str, ended: bool) -> str | bool:
    """The part after `import` in `rest` (what follows a `from` line's module), once the keyword is there;
    before that, whether the line can still reach it (`from .x` alone is no statement)."""
    if not rest.strip():
        return not ended
    keyword = _IMPORT_KEYWORD.fullmatch(rest)
    if keyword is None:
        return False
    if not keyword["clause"] and not ended:
        return "import".startswith(keyword["keyword"])
    if keyword["keyword"] != "import":
        return False
    return keyword["clause"]


def wanted_endings(line: str, names: ImportNames) -> list[str]:
    """What would finish importing a name the file is missing, once `line` imports from a module of the
    workspace that binds one (`ImportNames.wanted`), or once it is an `import` line while a standard module is
    wanted whole (`ImportNames.wanted_modules`): the rest of each such name after what is spelled."""
    statement = _IMPORT_LINE.fullmatch(line)
    if statement is not None and names.wanted_modules:
        clause = statement["clause"]
        if not clause:
            return [" " + module for module in sorted(names.wanted_modules)]
        spelled = clause[1:]
        if clause[:1] != " " or not spelled.isidentifier():
            return []
        return [
            m[len(spelled) :] for m in sorted(names.wanted_modules) if m.startswith(spelled) and m != spelled
        ]
    match = _FROM.fullmatch(line)
    if match is None or match["module"] not in names.wanted:
        return []
    keyword = _IMPORT_KEYWORD.fullmatch(match["rest"])
    if keyword is None or keyword["keyword"] != "import" or "," in keyword["clause"]:
        return []
    clause = keyword["clause"]
    spelled = clause[1:] if clause[:1] == " " else clause
    if not clause:
        return [" " + name for name in names.wanted[match["module"]]]
    return [name[len(spelled) :] for name in names.wanted[match["module"]] if name.startswith(spelled)]


def judged_from_line(line: str, names: ImportNames) -> bool:
    """Whether `line` is a `from` line whose module `import_line_fits` judges (not the standard library's)."""
    match = _FROM.fullmatch(line)
    return match is not None and _judged(match["module"], names)


def word_endings(line: str, names: ImportNames) -> list[str]:
    """What would finish the module or the name being spelled at the end of `line`: the rest of each known
    spelling it begins (["set"] after `import OpenAPITool` where the module binds OpenAPIToolset); at a line of
    `__all__`, `export_endings`."""
    if names.exports is not None:
        return export_endings(line, names.exports)
    match = _FROM.fullmatch(line)
    if match is None or not _judged(match["module"], names):
        return []
    module = match["module"]
    known: Iterable[str] = names.modules
    if match["rest"]:
        if module not in names.modules:
            return []
        spelled = _WORD_AT_END.search(line)
        if spelled is None:
            return _awaited_names(line, match["rest"], names.modules[module])
        module, known = spelled[0], names.modules[module]
    return [
        spelling[len(module) :] for spelling in known if spelling.startswith(module) and spelling != module
    ]


def _awaited_names(line: str, rest: str, bound: frozenset[str]) -> list[str]:
    """Inside a `from` line's parentheses, where a name is due (after the `(` or a comma): each name `bound`
    holds, spelled from there (with its space where the line does not end in one); else nothing."""
    if not _AWAITING_NAME.fullmatch(rest):
        return []
    space = "" if line[-1:].isspace() else " "
    return [space + name for name in sorted(bound) if name != ANY_NAME]


def _judged(module: str, names: ImportNames) -> bool:
    """Whether the server enumerated where `module` can lead: relative spellings down to `relative_depth`
    dots, absolute ones whose first part is a workspace package (known only once that part is complete)."""
    dots = len(module) - len(module.lstrip("."))
    if dots:
        return dots <= names.relative_depth
    head, dot, _ = module.partition(".")
    return bool(dot) and _workspace_package(head, names)


def _workspace_package(module: str, names: ImportNames) -> bool:
    """Whether an absolute `module`, spelled out, is in one of the workspace's own packages."""
    head = module.partition(".")[0]
    return any(known.partition(".")[0] == head for known in names.modules if known[:1] != ".")


def _clause_fits(clause: str, bound: frozenset[str], ended: bool) -> bool:
    """Whether the part after `import` names only what `bound` holds; the last name may still be spelled."""
    cut = _STATEMENT_END.search(clause)
    if cut is not None:
        clause, ended = clause[: cut.start()], True
    if clause[:1] not in ("", " ", "\t") or clause[1:2].isspace():  # `importx`; `import  x`
        return False
    body = clause.lstrip(" \t")  # a space after the last name ends it: it is kept
    opened = body.startswith("(")  # the names may go on over the next lines
    if opened:
        body = body[1:]
    continued = body.find("\\")  # a line continuation: the names before it are complete
    if continued != -1:
        body, ended = body[:continued], True
    items = body.split(",")
    if ended and not opened and continued == -1 and not items[-1].strip():  # `import a,` ends no statement
        return False
    named: set[str] = set()  # a name imported twice in one line is a model repeating itself
    for index, item in enumerate(items):
        closed = ")" in item
        if closed and (not opened or index != len(items) - 1 or item[item.index(")") + 1 :].strip()):
            return False  # `)` closes only the `(` after `import`, and ends the names
        words = item.replace(")", " ").split()
        if not words:
            continue
        name = words[0]
        if name == "*":
            continue
        open_end = index == len(items) - 1 and not ended and not closed and not item[-1:].isspace()
        if not name.isidentifier() or not _alias_fits(words[1:], open_end):
            return False
        if open_end and len(words) == 1:  # the name is still being spelled
            if ANY_NAME not in bound and not any(k.startswith(name) and k not in named for k in bound):
                return False
        elif name in named or (ANY_NAME not in bound and name not in bound):
            return False
        named.add(name)
    return True


def _complete_names(items: Iterable[str]) -> set[str]:
    """The names that `items` (a clause's parts between commas, each complete) import."""
    return {words[0] for item in items if (words := item.replace(")", " ").split())}


def _alias_fits(words: list[str], open_end: bool) -> bool:
    """Whether what follows a name is nothing or `as alias` (the last word may still be being spelled)."""
    if not words:
        return True
    if len(words) > 2 or (len(words) == 2 and not words[1].isidentifier()):
        return False
    if len(words) == 1 and open_end:
        return "as".startswith(words[0])
    return words[0] == "as"


class ImportLineConstraint:
    """One generation's steering of its first line, if that line is a `from` import or a line of `__all__`
    (`import_line_fits`).

    `forced_text` is token healing's forced prefix: the first generated tokens spell it (already typed, it is
    part of `names.line_start`), so the line is `line_start` plus what the tokens write after it.
    """

    def __init__(self, names: ImportNames, token_texts: TokenTexts, forced_text: str = "") -> None:
        self.names = names
        self.token_texts = token_texts
        self.forced_text = forced_text
        self.generated = ""  # the text of every accepted token, the forced spelling included
        self.steered_rows = 0  # rows where tokens that did not fit were masked
        self._done = not self._may_steer(names.line_start)

    def constrain(self, logits: torch.Tensor, path: Sequence[int] = ()) -> torch.Tensor:
        """Mask logits rows [n, vocab]: row i is the distribution after `path[:i]` (a verify's drafts). The
        walk stops at the first drafted token masked at its row: it is rejected there, later rows never read.
        Row tensors are changed only where steering applies; other calls return `logits` itself."""
        if self._done:
            return logits
        constrained = logits
        generated = self.generated
        for row in range(logits.shape[0]):
            line, ended = self._line(generated)
            if ended:  # nothing more to steer
                break
            owed = self._owed(generated)
            if line is None and owed:  # this row's token may finish the forced prefix and begin the line
                line = self.names.line_start
            if line is not None and self._steers(line):
                fitting = self._fitting(logits[row], line, owed)
                if fitting is not None:
                    if constrained is logits:
                        constrained = logits.clone()
                    kept = constrained[row, fitting]
                    constrained[row] = float("-inf")
                    constrained[row, fitting] = kept
                    self.steered_rows += 1
                    if row < len(path) and path[row] not in fitting:
                        break
            if row >= len(path):
                break
            generated += self._text(path[row])
        return constrained

    def advance(self, token_ids: Sequence[int]) -> None:
        """Account for tokens the target accepted."""
        if self._done:
            return
        for token_id in token_ids:
            self.generated += self._text(token_id)
        line, ended = self._line(self.generated)
        self._done = ended or (line is not None and not self._may_steer(line))

    def _may_steer(self, line: str) -> bool:
        """Whether the line may still become one this constraint steers (a line of `__all__` always is)."""
        if self.names.exports is not None:
            return True
        return may_become_from_import(line) or (bool(self.names.wanted_modules) and may_become_import(line))

    def _steers(self, line: str) -> bool:
        """Whether this row is steered: a `from` line; while a standard module is wanted whole, also a line
        still choosing between `from` and `import`, and an `import` line; a line of `__all__`."""
        if self.names.exports is not None or self.names.wanted_modules:
            return self._may_steer(line)
        return line.lstrip(" \t").startswith("from")

    def _line(self, generated: str) -> tuple[str | None, bool]:
        """(the cursor's line so far, None while the forced prefix is not spelled yet; whether it ended)."""
        if len(generated) < len(self.forced_text):
            return None, False
        written = generated[len(self.forced_text) :]
        if "\n" in written or "\r" in written:
            return None, True
        return self.names.line_start + written, False

    def _owed(self, generated: str) -> str:
        """What of the forced prefix is still to be spelled after `generated` (its last whitespace usually comes
        with the line's first word: " Name"); "" once it is spelled, and where `generated` left it."""
        if len(generated) >= len(self.forced_text) or not self.forced_text.startswith(generated):
            return ""
        return self.forced_text[len(generated) :]

    def _fitting(self, row: torch.Tensor, line: str, owed: str = "") -> list[int] | None:
        """Where the file is missing names, first: of the row's STEERED_CANDIDATES best tokens, those on the way
        to importing one (`wanted_import_fits`), or where none is, those spelling the missing name from the
        module the line names (`wanted_endings`). Then, or where all of the best are on that way: those that
        keep the line fitting; where none of them does, the tokens that go on spelling a module or name the
        line has begun (`word_endings`: a prefix allowed earlier must lead somewhere). None where all of the
        best fit, or nothing does (the row stands). `owed`: what of the forced prefix a token must spell first."""
        candidates = row.float().topk(min(STEERED_CANDIDATES, row.shape[-1])).indices.tolist()
        vocab = row.shape[-1]  # the tokenizer may know ids the model's head lacks
        if self.names.wanted or self.names.wanted_elsewhere or self.names.wanted_modules:
            wanted = [token for token in candidates if self._fits(line, token, wanted_import_fits, owed)]
            if wanted and len(wanted) < len(candidates):
                return wanted
            if not wanted:  # a line already importing from where a missing name is goes on to that name
                endings = wanted_endings(line, self.names)
                spelled = self._spelling(endings, line, vocab, wanted_import_fits, owed)
                if spelled:
                    return spelled
        fitting = [token for token in candidates if self._fits(line, token, import_line_fits, owed)]
        if len(fitting) == len(candidates):
            return None
        if not fitting:
            fitting = self._spelling(word_endings(line, self.names), line, vocab, import_line_fits, owed)
        return fitting or None

    def _spelling(
        self, endings: Iterable[str], line: str, vocab: int, fits: LineRule, owed: str = ""
    ) -> list[int]:
        """The tokens that go on spelling one of `endings` (after what is `owed` of the forced prefix) and keep
        the line fitting `fits`."""
        spelling: set[int] = set()
        for ending in endings:
            try:
                spelling.update(self.token_texts.allowed_ids(owed + ending).tolist())
            except ValueError:  # no token spells it (a letter the vocabulary lacks)
                continue
        return sorted(t for t in spelling if t < vocab and self._fits(line, t, fits, owed))

    def _fits(self, line: str, token_id: int, fits: LineRule = import_line_fits, owed: str = "") -> bool:
        if self.token_texts.is_special(token_id):  # the end of text (or a marker) ends the line as it is
            return fits(line, self.names, True)
        token_text = self._text(token_id)
        if not token_text:  # an id the tokenizer does not know: not this rule's business
            return True
        if owed:
            # A token still inside the forced prefix (or off it: healing's business) is not judged here.
            if not token_text.startswith(owed):
                return True
            token_text = token_text[len(owed) :]
        breaks = [at for at in (token_text.find("\n"), token_text.find("\r")) if at != -1]
        if breaks:
            return fits(line + token_text[: min(breaks)], self.names, True)
        return fits(line + token_text, self.names, False)

    def _text(self, token_id: int) -> str:
        texts = self.token_texts.texts
        return texts[token_id] if 0 <= token_id < len(texts) else ""
