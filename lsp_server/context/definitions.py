"""The names a Python file uses but does not bind, and the top-level names a module defines: what the lines
of a file's import block need and the model cannot know.

An import line names a module of the project and what it defines (`from .openapi_spec_parser import
RestApiTool`). Neither is in the file: the names it needs are used further down, mostly past the few tokens
after the cursor a line start re-reads, and the modules are files the editor has not opened. Both models
wrote the exact next line at 1 of 15 import lines of unseen code (docs/line-starts.md). These pure functions
find the names; `context.workspace` finds where the project defines them.
"""

from __future__ import annotations

import builtins
import functools
import keyword
import re

# A name used in the file: not after a dot (an attribute), not a keyword argument; keywords and builtins are
# left out later.
_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?![\w]|[ \t]*=[^=])")
_IMPORT_STATEMENT = re.compile(r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+)?import[ \t]+(?:\([^)]*\)|[^\n]*)", re.M)
_ALL = re.compile(r"^__all__[ \t]*(?::[^=\n]*)?\+?=[ \t]*[\[(]([^\])]*)[\])]", re.MULTILINE)
_PROSE = re.compile(
    r"(?P<triple>\"\"\"[\s\S]*?(?:\"\"\"|$)|'''[\s\S]*?(?:'''|$))"
    r"|(?P<string>[rbuRBUfF]{0,2}\"[^\"\n\\]*(?:\\.[^\"\n\\]*)*\"|[rbuRBUfF]{0,2}'[^'\n\\]*(?:\\.[^'\n\\]*)*')"
    r"|(?P<comment>#[^\n]*)"
)
_DEF = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)", re.MULTILINE)
_ASSIGNED = re.compile(r"^[ \t]*([A-Za-z_]\w*(?:[ \t]*,[ \t]*[A-Za-z_]\w*)*)[ \t]*(?::[^=\n]*)?=(?!=)", re.M)
_ANNOTATED = re.compile(r"^[ \t]*([A-Za-z_]\w*)[ \t]*:(?!=)[ \t]*[^\s=][^=\n]*$", re.MULTILINE)  # `name: str`
_AS = re.compile(r"\bas[ \t]+(\w+)")
_FOR = re.compile(r"\bfor[ \t]+([\w, \t]+?)[ \t]+in\b")
_FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t]+(\([^)]*\)|[^\n#]+)", re.MULTILINE)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w., \t]+)", re.MULTILINE)
_PARAMETERS = re.compile(r"\bdef[ \t]+\w+[ \t]*\(([^)]*)\)", re.MULTILINE)
_LAMBDA = re.compile(r"\blambda\b([^:]*):")
_TOP_LEVEL = re.compile(
    r"^(?:async[ \t]+)?(?:def|class)[ \t]+(?P<definition>\w+)|^(?P<assigned>[A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=(?!=)",
    re.MULTILINE,
)
_TOP_LEVEL_FROM_IMPORT = re.compile(r"^from[ \t]+[\w.]+[ \t]+import[ \t]+(\([^)]*\)|[^\n#]+)", re.MULTILINE)
_IMPORT_LINE = re.compile(r"^(?:from[ \t]+[\w.]+[ \t]+import\b|import[ \t]+\w)")
_DOTTED = re.compile(r"[ \t]*\.[ \t]*([A-Za-z_]\w*)")
_KNOWN = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins))
HEAD_CHARS = 120  # of a definition's first line: a signature, not a body
NEAR_CHARS = 4000  # of the text above and below the cursor that says whether it is among the imports


def code_only(text: str) -> str:
    """`text` with comments and string literals blanked (line breaks kept)."""
    return _PROSE.sub(lambda match: re.sub(r"[^\n]", " ", match.group(0)), text)


def bound_names(code: str) -> set[str]:
    """Names the file binds itself: definitions, assignments, imports, loop and `as` targets, parameters."""
    bound = set(_DEF.findall(code)) | set(_AS.findall(code)) | set(_ANNOTATED.findall(code))
    for group in _ASSIGNED.findall(code) + _FOR.findall(code):
        bound.update(part.strip() for part in group.split(","))
    for names in _FROM_IMPORT.findall(code):
        bound.update(imported_names(names))
    for modules in _IMPORT.findall(code):
        for part in modules.split(","):
            words = part.split()
            if words:
                bound.add(words[-1].split(".")[0])
    for parameters in _PARAMETERS.findall(code) + _LAMBDA.findall(code):
        for part in parameters.split(","):
            name = part.split(":")[0].split("=")[0].strip().lstrip("*")
            if name:
                bound.add(name)
    return bound


@functools.lru_cache(maxsize=8)  # typing on a line leaves the text without that line unchanged
def unbound_names(text: str) -> tuple[str, ...]:
    """The names `text` uses but neither binds nor gets from the language, in order of first use, then those
    its `__all__` lists (a package's `__init__.py` exports what it imports)."""
    code, code_without_imports = _code_views(text)
    bound = bound_names(code)
    used = [
        m.group(0) for m in _NAME.finditer(code_without_imports) if _names_something(m, code_without_imports)
    ]
    used += listed_names(text)
    seen: dict[str, None] = {}
    for name in used:
        if name not in bound and name not in _KNOWN and not name.startswith("__"):
            seen.setdefault(name, None)
    return tuple(seen)


def dotted_uses(text: str, name: str) -> frozenset[str] | None:
    """The attributes `text` reads from `name` (`deepcopy` for `copy.deepcopy(x)`), where the code uses it only
    so, as a module is used; None where it uses `name` any other way (called, passed, assigned) or not at all."""
    code = _code_views(text)[1]
    attributes: set[str] = set()
    for match in re.finditer(rf"(?<![\w.]){re.escape(name)}\b", code):
        attribute = _DOTTED.match(code, match.end())
        if attribute is None:
            return None
        attributes.add(attribute.group(1))
    return frozenset(attributes) or None


@functools.lru_cache(maxsize=2)  # `unbound_names`, then `dotted_uses` per name it found, read the same text
def _code_views(text: str) -> tuple[str, str]:
    """`text` as code only, and that code without its import statements (module paths are not names the file
    uses)."""
    code = code_only(text)
    return code, _IMPORT_STATEMENT.sub(" ", code)


def _names_something(match: re.Match[str], code: str) -> bool:
    """Whether a name is likely code rather than a word of prose the blanking missed (an unclosed docstring
    while the user types): spelled like a class, constant or function, or called, indexed or dotted into."""
    name = match.group(0)
    if "_" in name or not name.islower():
        return True
    after = code[match.end() : match.end() + 2]
    return after[:1] in ("(", "[") or (after[:1] == "." and after[1:2].isidentifier())


def top_level_definitions(text: str, reexports: bool = False) -> dict[str, str]:
    """Each name a module defines at its top level (def, class, assignment) -> the first line that defines it,
    cut to HEAD_CHARS. `reexports` (a package's `__init__.py`): the names its imports bring in too, which is
    how a package exports them."""
    found: dict[str, str] = {}
    for match in _TOP_LEVEL.finditer(text):
        name = match.group("definition") or match.group("assigned")
        if name and name not in found:
            found[name] = _line_at(text, match.start())
    if reexports:
        for match in _TOP_LEVEL_FROM_IMPORT.finditer(text):
            for name in imported_names(match.group(1)):
                found.setdefault(name, _line_at(text, match.start()))
    return found


def listed_names(text: str) -> list[str]:
    """The names a module's `__all__` lists."""
    return [name for listed in _ALL.findall(text) for name in re.findall(r"[\"']([A-Za-z_]\w*)[\"']", listed)]


def imported_names(clause: str) -> list[str]:
    """The names the part after `import` in `from m import ...` binds: each alias, else each name."""
    names = []
    for part in clause.strip("()").replace("\n", ",").split(","):
        words = part.split("#")[0].split()
        if words and words[-1].isidentifier():
            names.append(words[-1])
    return names


def _line_at(text: str, start: int) -> str:
    end = text.find("\n", start)
    return text[start : end if end != -1 else len(text)][:HEAD_CHARS].rstrip()


def without_line_at(text: str, offset: int) -> str:
    """`text` without the line that holds `offset`: what the user is typing there must not change which
    definitions the prompt holds (its head would no longer be cached)."""
    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    return text[:line_start] + (text[line_end + 1 :] if line_end != -1 else "")


def in_import_block(text: str, offset: int) -> bool:
    """Whether the cursor starts a line, or types an import, among the file's imports: the nearest code line
    above or below is an import at column 0, or nothing but comments and a docstring comes before it."""
    line_start = text.rfind("\n", 0, offset) + 1
    typed = text[line_start:offset].lstrip()
    if typed and not any(typed.startswith(word) or word.startswith(typed) for word in ("from ", "import ")):
        return False
    # Only the text near the cursor is read: this runs at every request, in files of any size.
    window_start = max(0, line_start - NEAR_CHARS)
    above = code_only(text[window_start:line_start]).split("\n")[1 if window_start else 0 :]
    below_start = text.find("\n", offset) + 1
    below_end = below_start + NEAR_CHARS
    below = code_only(text[below_start:below_end]).split("\n") if below_start else []
    if below_end < len(text):
        below = below[:-1]  # a line cut by the window
    nearest_above = next((line for line in reversed(above) if line.strip()), None)
    nearest_below = next((line for line in below if line.strip()), None)
    if nearest_above is None:
        return window_start == 0
    return any(line is not None and _IMPORT_LINE.match(line) for line in (nearest_above, nearest_below))
