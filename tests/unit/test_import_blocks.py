"""A line among the names of a parenthesized `from M import (` block, or of an `__all__` list
(`context.import_blocks`): the block found around the cursor, the names the line may still import or list, and
the builder asking the engine to steer it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.api import ExportNames, ImportNames
from engine.healing import TokenTexts
from engine.imports import ImportLineConstraint, export_line_fits, import_line_fits
from lsp_server.context.builder import ContextSettings
from lsp_server.context.import_blocks import (
    ExportList,
    ImportBlock,
    block_order,
    export_list_at,
    import_block_at,
    member_type_key,
    names_for_line,
)
from tests.unit.steering_support import context_at

BLOCK = (
    '"""Spans."""\n\n'
    "from .spans import (  # the public ones\n"
    "    AgentSpanData,\n"
    "    GenerationSpanData,\n"
    "<>\n"
    "    HandoffSpanData, ResponseSpanData as Response,\n"
    "\n"
    "    # the last one\n"
    "    TaskSpanData)\n"
    "\n"
    "x = 1\n"
)


def _at(marked: str) -> ImportBlock | None:
    return import_block_at(marked.replace("<>", ""), marked.index("<>"))


def test_the_block_around_the_cursor_and_its_names_both_ways() -> None:
    assert _at(BLOCK) == ImportBlock(
        ".spans",
        ("AgentSpanData", "GenerationSpanData"),
        ("HandoffSpanData", "ResponseSpanData", "TaskSpanData"),
    )
    indented = BLOCK.replace("<>", "    Gu<>")  # the start of a name typed
    assert _at(indented) is not None
    first = "from agents.tracing import (SpanData,\n    <>\n"  # names on the `from` line; no `)` yet
    assert _at(first) == ImportBlock("agents.tracing", ("SpanData",), ())


def test_no_block_where_the_cursor_is_not_on_a_fresh_line_among_its_names() -> None:
    assert _at(BLOCK.replace("<>", "    Gu<>ard")) is None  # text after the cursor
    assert _at(BLOCK.replace("<>", "    x = <>")) is None  # not a name
    closed = "from .spans import (\n    AgentSpanData,\n)\n<>\n"
    assert _at(closed) is None
    one_line = "from .spans import (AgentSpanData, TaskSpanData)\n<>\n"
    assert _at(one_line) is None
    call = "result = run(\n    first,\n<>\n"
    assert _at(call) is None
    code_between = "from .spans import (\n    A,\nx = f(\n<>\n"
    assert _at(code_between) is None


def test_the_order_a_block_is_sorted_by() -> None:
    ruff = ["LIMIT", "VERSION", "AgentSpan", "handoff", "task"]  # constants, classes, the rest
    assert block_order(ruff) is member_type_key
    case_blind = ["agent", "Handoff", "task"]
    assert block_order(case_blind) is not None and block_order(case_blind) is not member_type_key
    assert block_order(["b", "a", "c"]) is None
    assert block_order(["b", "a"]) is None  # two names tell no order


def test_the_names_a_line_may_still_import() -> None:
    bound = frozenset({"AgentSpanData", "GenerationSpanData", "GuardrailSpanData", "HandoffSpanData", "Zeta"})
    block = ImportBlock(
        ".spans", ("AgentSpanData", "GenerationSpanData"), ("HandoffSpanData", "TaskSpanData")
    )
    # Sorted: between GenerationSpanData and HandoffSpanData, and not listed.
    assert names_for_line(bound, block) == {"GuardrailSpanData"}
    unsorted = ImportBlock(".spans", ("HandoffSpanData", "AgentSpanData"), ("TaskSpanData",))
    assert names_for_line(bound, unsorted) == {"GenerationSpanData", "GuardrailSpanData", "Zeta"}
    at_the_end = ImportBlock(".spans", ("AgentSpanData", "GenerationSpanData", "HandoffSpanData"), ())
    assert names_for_line(bound, at_the_end) == {"Zeta"}


def _project(root: Path) -> Path:
    """pkg/spans.py defines the names; pkg/__init__.py is the file being written."""
    package = root / "pkg"
    package.mkdir()
    (package / "spans.py").write_text(
        "".join(
            f"class {name}:\n    pass\n\n\n"
            for name in ("AgentSpanData", "GuardrailSpanData", "TaskSpanData")
        )
        + "class GenerationSpanData:\n    pass\n\n\nclass HandoffSpanData:\n    pass\n"
    )
    init = package / "__init__.py"
    init.write_text("")
    return init


def test_the_builder_steers_a_line_of_the_block_to_the_name_that_fits(tmp_path: Path) -> None:
    init = _project(tmp_path)
    marked = (
        "from .spans import (\n    AgentSpanData,\n    GenerationSpanData,\n    <>\n    HandoffSpanData,\n"
        "    TaskSpanData,\n)\n"
    )
    ctx = context_at(init, tmp_path, marked)
    names = ctx.import_names
    assert names is not None
    assert names.line_start == "from .spans import (    "
    assert names.modules == {".spans": frozenset({"GuardrailSpanData"})}
    assert import_line_fits(names.line_start + "GuardrailSpanData,", names, ended=True)
    assert not import_line_fits(names.line_start + "TaskSpanData,", names, ended=True)  # listed below
    assert not import_line_fits(names.line_start + "GuardrailSpanDataX,", names, ended=True)
    assert context_at(init, tmp_path, marked, ContextSettings(steer_imports=False)).import_names is None
    # A module the workspace does not have is not judged: the line is left to the model.
    elsewhere = marked.replace("from .spans", "from typing")
    assert context_at(init, tmp_path, elsewhere).import_names is None


def test_the_engine_constraint_masks_a_name_the_module_lacks_on_such_a_line(tmp_path: Path) -> None:
    init = _project(tmp_path)
    marked = (
        "from .spans import (\n    AgentSpanData,\n    GenerationSpanData,\n<>\n    HandoffSpanData,\n)\n"
    )
    names = context_at(init, tmp_path, marked).import_names
    assert names is not None
    texts = ["\n", "    ", " Gu", " Task", "ardrail", "SpanData", ","]
    constraint = ImportLineConstraint(names, TokenTexts(texts), forced_text="\n")
    constraint.advance([0])  # the forced line break
    logits = torch.tensor([[0.0, 0.0, 1.0, 5.0, 0.0, 0.0, 0.0]])  # the model prefers " Task" (listed below)
    steered = constraint.constrain(logits)
    assert int(steered[0].argmax()) == texts.index(" Gu")
    assert steered[0, texts.index(" Task")] == float("-inf")


def test_the_first_word_is_steered_where_its_token_finishes_the_forced_indentation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Token healing re-spells the line break and indentation, the last space with the word (" Task"): that
    row is the line's first word, so it is steered too; where none of the best tokens begins a name that fits,
    the tokens spelling one do."""
    init = _project(tmp_path)
    marked = (
        "from .spans import (\n    AgentSpanData,\n    GenerationSpanData,\n    <>\n    HandoffSpanData,\n)\n"
    )
    names = context_at(init, tmp_path, marked).import_names
    assert names is not None
    texts = ["\n", "   ", " Task", " Gu", "ardrail", "SpanData", ",", " Zeta"]
    constraint = ImportLineConstraint(names, TokenTexts(texts), forced_text="\n    ")
    constraint.advance([0, 1])  # "\n" and three spaces: one space is still owed
    logits = torch.tensor([[0.0, 0.0, 5.0, 1.0, 0.0, 0.0, 0.0, 4.0]])
    steered = constraint.constrain(logits)
    assert int(steered[0].argmax()) == texts.index(" Gu")
    assert steered[0, texts.index(" Task")] == float("-inf")
    # None of the two best (" Task", " Zeta") fits: the tokens that spell the name are what stays.
    monkeypatch.setattr("engine.imports.STEERED_CANDIDATES", 2)
    steered = ImportLineConstraint(names, TokenTexts(texts), forced_text="\n    ")
    steered.advance([0, 1])
    row = steered.constrain(logits)[0]
    assert torch.isfinite(row).tolist() == [text == " Gu" for text in texts]


EXPORTS = (
    "from .agent import Agent, AgentResult\n"
    "from .tools import tool\n\n"
    "__all__ = [\n"
    '    "Agent",  # the entry point\n'
    "<>\n"
    "\n"
    '    "tool",\n'
    "]\n"
)


def _exports_at(marked: str) -> ExportList | None:
    return export_list_at(marked.replace("<>", ""), marked.index("<>"))


def test_the_all_list_around_the_cursor_its_names_and_quote() -> None:
    assert _exports_at(EXPORTS) == ExportList(("Agent",), ("tool",), '"', commas=True)
    assert _exports_at(EXPORTS.replace("<>", '    "Ag<>')) is not None  # the start of an entry typed
    single = "__all__: list[str] = ['Agent',\n    <>\n    'tool']\n"
    assert _exports_at(single) == ExportList(("Agent",), ("tool",), "'", commas=True)
    last = "__all__ = [\n    'Agent', 'Runner'\n    <>\n]\n"  # no comma after the names above, none below
    assert _exports_at(last) == ExportList(("Agent", "Runner"), (), "'", commas=False)
    assert _exports_at(EXPORTS.replace("<>", '    "Ag<>ent",')) is None  # text after the cursor
    assert _exports_at(EXPORTS.replace("]\n", "")) is None  # unclosed: the line may be its end
    assert _exports_at('__all__ = ["Agent"]\n<>\n') is None  # closed above the cursor
    assert _exports_at('names = [\n    "Agent",\n<>\n]\n') is None  # another list
    assert _exports_at("__all__ = [\n    *agents.__all__,\n<>\n]\n") is None  # not strings


EXPORT_NAMES = ExportNames(frozenset({"AgentResult", "Agent", "tools"}))


@pytest.mark.parametrize(
    ("line", "ended", "fits"),
    [
        ("    ", False, True),
        ("    ", True, False),  # a blank line where an entry is due
        ('    "Age', False, True),
        ('    "AgentResult",', True, True),
        ('    "AgentResult",  # what a run returns', True, True),
        ('    "AgentResult", "tools",', True, True),
        ('    "AgentResult"', True, False),  # the comma the next entry needs
        ('    "AgentResult" ', False, True),
        ('    "AgentRes', True, False),
        ('    "Runner",', True, False),  # not bound
        ('    "Run', False, False),
        ("    'AgentResult',", True, False),  # the list's other quote
        ('    "AgentResult", "AgentResult",', True, False),
        ('    "AgentResult" "tools",', True, False),
        ("    # agents", True, False),
        ("    ]", True, False),
    ],
)
def test_which_lines_of_the_all_list_fit(line: str, ended: bool, fits: bool) -> None:
    assert export_line_fits(line, EXPORT_NAMES, ended) is fits


def test_the_last_entry_may_end_without_its_comma() -> None:
    last = ExportNames(frozenset({"Agent"}), comma_due=False)
    assert export_line_fits('    "Agent"', last, ended=True)


def _package(root: Path, init: str) -> Path:
    """pkg/ with the submodules agent.py and tools/; pkg/__init__.py holds `init` (the cursor's `<>` left out)."""
    package = root / "pkg"
    (package / "tools").mkdir(parents=True)
    (package / "tools" / "__init__.py").write_text("")
    (package / "agent.py").write_text("class Agent:\n    pass\n\n\nclass AgentResult:\n    pass\n")
    path = package / "__init__.py"
    path.write_text(init.replace("<>", ""))
    return path


def test_the_last_name_of_a_list_whose_lines_end_with_commas_gets_its_comma(tmp_path: Path) -> None:
    at_the_end = EXPORTS.replace('<>\n\n    "tool",\n', "<>\n")
    init = _package(tmp_path, at_the_end)
    names = context_at(init, tmp_path, at_the_end).import_names
    assert names is not None and names.exports is not None and names.exports.comma_due
    assert not import_line_fits(names.line_start + '"AgentResult"', names, ended=True)


def test_the_builder_steers_a_line_of_all_to_what_the_package_binds(tmp_path: Path) -> None:
    init = _package(tmp_path, EXPORTS)
    names = context_at(init, tmp_path, EXPORTS).import_names
    assert names is not None and names.exports is not None
    # The names the file binds and its submodules, less those listed; two listed tell no order.
    assert names.exports.names == {"AgentResult", "agent", "tools"}
    assert names.exports.quote == '"'
    assert import_line_fits(names.line_start + '"AgentResult",', names, ended=True)
    assert not import_line_fits(names.line_start + '"tool",', names, ended=True)  # listed below
    assert context_at(init, tmp_path, EXPORTS, ContextSettings(steer_imports=False)).import_names is None
    # A package whose submodules are unknown (no workspace folder) is not judged.
    assert context_at(init, None, EXPORTS).import_names is None


def test_a_sorted_all_list_narrows_the_line_to_the_names_between_its_neighbours(tmp_path: Path) -> None:
    sorted_list = (
        "from .agent import Agent, AgentResult, Runner, Zeta\n\n"
        '__all__ = [\n    "Agent",\n    <>\n    "Runner",\n    "Zeta",\n]\n'
    )
    init = _package(tmp_path, sorted_list)
    names = context_at(init, tmp_path, sorted_list).import_names
    assert names is not None and names.exports is not None
    assert names.exports.names == {"AgentResult"}


def test_a_module_that_makes_names_on_demand_leaves_all_open(tmp_path: Path) -> None:
    lazy = EXPORTS + "\n\ndef __getattr__(name):\n    return name\n"
    init = _package(tmp_path, lazy)
    assert context_at(init, tmp_path, lazy).import_names is None


def test_the_engine_steers_an_entry_of_all_to_a_name_that_is_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    names = ImportNames("    ", {}, exports=EXPORT_NAMES)
    texts = ["\n", ' "', '"', "Agent", "Runner", "Result", '",', "<eos>"]
    token_texts = TokenTexts(texts, excluded_ids=[texts.index("<eos>")])
    constraint = ImportLineConstraint(names, token_texts)
    logits = torch.tensor([[5.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 4.0]])  # a blank line, then the end of text
    row = constraint.constrain(logits)[0]
    assert int(row.argmax()) == texts.index('"')
    assert row[texts.index("\n")] == float("-inf") and row[texts.index("<eos>")] == float("-inf")
    constraint.advance([texts.index('"')])
    row = constraint.constrain(torch.tensor([[0.0, 0.0, 0.0, 1.0, 5.0, 0.0, 0.0, 0.0]]))[0]
    assert int(row.argmax()) == texts.index("Agent")  # "Runner" is not bound
    constraint.advance([texts.index("Agent")])
    row = constraint.constrain(torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 5.0, 0.0]]))[0]
    assert int(row.argmax()) == texts.index('",')  # "Agent" is bound: the line may end its entry here
