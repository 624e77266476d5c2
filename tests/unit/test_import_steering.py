"""Import-line steering: which `from` lines fit what the workspace has (`engine.imports`), what a file may
import from its workspace (`context.workspace.importable`), and where the context builder asks for it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.api import ImportNames
from engine.healing import TokenTexts
from engine.imports import (
    ImportLineConstraint,
    import_line_fits,
    wanted_endings,
    wanted_import_fits,
    word_endings,
)
from lsp_server.context.builder import ContextSettings
from lsp_server.context.definitions import dotted_uses
from lsp_server.context.workspace import MAX_FILE_BYTES, WorkspaceFiles, standard_modules_used
from lsp_server.documents import new_document
from tests.unit.steering_support import context_at

NAMES = ImportNames(
    "",
    {
        ".llm_agent": frozenset({"LlmAgent", "Agent"}),
        ".": frozenset({"llm_agent", "types"}),
        "pkg.mod": frozenset({"Thing"}),
    },
    relative_depth=1,
)


@pytest.mark.parametrize(
    ("line", "ended", "fits"),
    [
        ("from .llm_agent import LlmAgent", True, True),
        ("    from .llm_agent import Agent", True, True),
        ("from .llm_agent import LLMAgent", True, False),  # a spelling the module does not define
        ("from .llm_agent import Ll", False, True),  # still on its way to LlmAgent
        ("from .llm_agent import LL", False, False),
        ("from .llm", False, True),
        ("from .gcp", False, False),  # no module of the package starts so
        ("from . import types", True, True),
        ("from . import identity", True, False),
        ("from .llm_agent import (LlmAgent, Ag", False, True),
        ("from .llm_agent import LlmAgent as Short", True, True),
        ("from .llm_agent import LlmAgent a", False, True),
        ("from .llm_agent import LlmAgent as", False, True),
        ("from .llm_agent import LlmAgent and", False, False),  # only `as` may follow a name
        ("from .llm_agent import LlmAgent as Short extra", True, False),
        ("from .llm_agent import LlmAgent  # why", True, True),
        ("from .llm_agent import Missing  # why", True, False),
        ("from .llm_agent imp", False, True),
        ("from .llm_agent importx", False, False),
        ("from .llm_agent import", True, False),  # no statement ends there
        ("from .llm_agent import LlmAgent,", True, False),
        ("from .llm_agent import (", True, True),  # the names follow on the next lines
        ("from .llm_agent", True, False),
        ("from .llm_agent import LlmAgent'", False, False),
        ("from pkg.mod import Thing", True, True),
        ("from pkg.mod import Other", True, False),
        ("from pkg.other import Thing", True, False),
        ("from .llm_agent import LlmAgent, \\", False, True),  # more names on the next line
        ("from .llm_agent import LLM \\", False, False),  # but those before it are complete
        ("from .llm_agent import LLM ", False, False),  # a space ends the name
        ("from .llm_agent import  LlmAgent", True, False),  # spelled plainly
        ("from .llm_agent import LlmAgent, LlmAgent", True, False),  # a name twice: a model repeating itself
        ("from .llm_agent import LlmAgent, Ll", False, False),  # nothing else begins so
        ("from .llm_agent import Agent, Ll", False, True),
        ("from .llm_agent import (LlmAgent, Agent)", True, True),
        ("from .llm_agent import LlmAgent)", False, False),  # `)` closes only a `(`
        ("from .llm_agent import (LlmAgent) x", False, False),  # and ends the names
        ("from .llm_agent import )", False, False),
        # Not judged: the standard library, installed packages, deeper relative imports, other lines. Their
        # names may be anything, but the line must still be able to be a statement.
        ("from typing import Anything", True, True),
        ("from pk", False, True),
        ("from ..elsewhere import anything", True, True),
        ("x = 1", True, True),
        ("from typing import", True, False),  # the model ended the line (or the text) at `import`
        ("from typing import ", True, False),
        ("from typing", True, False),
        ("from ..elsewhere import", True, False),
        ("from typing import Any,", True, False),
        ("from typing import (Any,", True, True),
        ("from typing import *", True, True),
        ("from typing import Any as A, Dict  # why", True, True),
        ("from typing import Any Dict", False, False),
        ("from typing import Any, Any", True, False),
        ("from typing imp", False, True),
        ("from typing import ", False, True),
    ],
)
def test_which_lines_fit(line: str, ended: bool, fits: bool) -> None:
    assert import_line_fits(line, NAMES, ended) is fits


def _project(root: Path) -> Path:
    """src/app/ with a subpackage and modules; returns app/agents/runner.py."""
    app = root / "app"
    (app / "agents").mkdir(parents=True)
    (app / "__init__.py").write_text("from .agents import Runner\n__all__ = ['Runner', 'VERSION']\n")
    (app / "config.py").write_text("LIMIT = 3\n\n\nclass Settings:\n    depth = 1\n")
    (app / "agents" / "__init__.py").write_text("from .runner import Runner\n")
    (app / "agents" / "llm_agent.py").write_text(
        "try:\n    from fast import speedup\nexcept ImportError:\n    speedup = None\n\n\nclass LlmAgent:\n    pass\n"
    )
    runner = app / "agents" / "runner.py"
    runner.write_text("from .llm_agent import LlmAgent\n\n\nclass Runner:\n    pass\n")
    return runner


def test_what_a_file_may_import_from_its_workspace(tmp_path: Path) -> None:
    runner = _project(tmp_path)
    found = WorkspaceFiles([tmp_path]).import_names(
        new_document(runner.as_uri(), "python", 1, runner.read_text())
    )
    assert found is not None
    modules, depth = found
    assert depth == 2  # `.x` in app/agents/, `..x` in app/
    assert {"LlmAgent", "speedup"} <= modules[".llm_agent"]  # a name bound in a try block is importable too
    assert modules["."] >= {"Runner", "llm_agent", "runner"}  # the package's names and its submodules
    assert modules["..config"] >= {"LIMIT", "Settings"}
    assert modules[".."] >= {"Runner", "VERSION", "agents", "config"}
    assert modules["app.agents.llm_agent"] == modules[".llm_agent"]
    assert "app.missing" not in modules


def test_deep_relative_spellings_go_up_to_the_outermost_package(tmp_path: Path) -> None:
    deep = tmp_path / "app" / "tools" / "mcp" / "auth"
    deep.mkdir(parents=True)
    for folder in (tmp_path / "app", tmp_path / "app" / "tools", deep.parent, deep):
        (folder / "__init__.py").write_text("")
    (tmp_path / "app" / "hooks.py").write_text("class HookRegistry:\n    pass\n")
    here = deep / "oauth.py"
    here.write_text("")
    found = WorkspaceFiles([tmp_path]).import_names(new_document(here.as_uri(), "python", 1, ""))
    assert found is not None
    modules, depth = found
    assert depth == 4  # app/tools/mcp/auth/ is four packages deep: `.` down to `....`
    assert modules["....hooks"] == {"HookRegistry"}
    assert "....." not in modules  # beyond the outermost package a relative import fails
    assert not import_line_fits(
        "from ....hooks import HookRegistri", ImportNames("", modules, depth), ended=True
    )


def test_a_file_outside_the_workspace_gets_nothing(tmp_path: Path) -> None:
    runner = _project(tmp_path / "inside")
    outside = WorkspaceFiles([tmp_path / "elsewhere"])
    (tmp_path / "elsewhere").mkdir()
    assert outside.import_names(new_document(runner.as_uri(), "python", 1, runner.read_text())) is None


def test_the_builder_asks_for_steering_at_the_imports_only(tmp_path: Path) -> None:
    runner = _project(tmp_path)
    at_imports = "from .llm_agent import LlmAgent\n<>\n\nclass Runner:\n    pass\n"
    ctx = context_at(runner, tmp_path, at_imports)
    assert ctx.import_names is not None
    assert ctx.import_names.line_start == ""
    assert ".llm_agent" in ctx.import_names.modules
    typing_from = "from .llm_agent import LlmAgent\nfrom .<>\n\nclass Runner:\n    pass\n"
    assert context_at(runner, tmp_path, typing_from).import_names.line_start == "from ."  # type: ignore[union-attr]
    in_body = "from .llm_agent import LlmAgent\n\n\nclass Runner:\n    <>\n"
    assert context_at(runner, tmp_path, in_body).import_names is None
    other_line = "from .llm_agent import LlmAgent\nx = <>\n\nclass Runner:\n    pass\n"
    assert context_at(runner, tmp_path, other_line).import_names is None
    off = ContextSettings(steer_imports=False)
    assert context_at(runner, tmp_path, at_imports, off).import_names is None


def test_names_made_on_demand_or_unread_leave_a_module_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = _project(tmp_path)
    app = tmp_path / "app"
    (app / "lazy.py").write_text("def __getattr__(name):\n    return name\n")
    (app / "starred.py").write_text("from .config import *\n")
    (app / "huge.py").write_text("x = 1\n" * (MAX_FILE_BYTES // 6 + 1))
    document = new_document(runner.as_uri(), "python", 1, runner.read_text())
    found = WorkspaceFiles([tmp_path]).import_names(document)
    assert found is not None
    modules, _ = found
    names = ImportNames("", modules, 2)
    for module in ("..lazy", "..starred", "..huge"):
        assert import_line_fits(f"from {module} import Anything", names, ended=True), module
    assert not import_line_fits("from ..config import Anything", names, ended=True)
    assert not import_line_fits("from ..missing import Anything", names, ended=True)
    # A project larger than the index lists: a module left out would look missing, so nothing is steered.
    monkeypatch.setattr("lsp_server.context.workspace.MAX_INDEXED_FILES", 3)
    assert WorkspaceFiles([tmp_path]).import_names(document) is None


def test_what_would_finish_the_word_being_spelled() -> None:
    assert sorted(word_endings("from .llm_agent import Ll", NAMES)) == ["mAgent"]
    assert sorted(word_endings("from .llm_agent import ", NAMES)) == []  # no word begun
    assert sorted(word_endings("from .l", NAMES)) == ["lm_agent"]
    assert word_endings("from typing import Li", NAMES) == []  # not judged
    assert word_endings("x = Ll", NAMES) == []


TEXTS = ["\n", " Open", "API", "Tool", "set", ",", "x", " as"]
TOOLSET = ImportNames("from .m import", {".m": frozenset({"OpenAPIToolset", "Other"})})


def _ids(*texts: str) -> list[int]:
    return [TEXTS.index(text) for text in texts]


def test_a_name_begun_is_finished_where_the_best_tokens_all_break_the_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("engine.imports.STEERED_CANDIDATES", 3)
    constraint = ImportLineConstraint(TOOLSET, TokenTexts(TEXTS))
    constraint.advance(_ids(" Open", "API", "Tool"))
    # The model would end the line or write on: none of its three best tokens fits, so the ones that finish
    # OpenAPIToolset stay.
    logits = torch.tensor([[9.0, 0.0, 0.0, 0.0, 1.0, 8.0, 7.0, 0.0]])
    steered = constraint.constrain(logits)
    assert torch.isfinite(steered[0]).tolist() == [t == "set" for t in TEXTS]
    assert constraint.steered_rows == 1


def test_a_verify_row_after_a_misfitting_draft_is_left_alone() -> None:
    constraint = ImportLineConstraint(TOOLSET, TokenTexts(TEXTS))
    # Drafted " Open" then "x": row 0 keeps " Open", row 1 masks "x" (rejected there), row 2 is never read.
    logits = torch.zeros(3, len(TEXTS))
    logits[0, _ids(" Open")] = 5.0
    logits[1, _ids("x")] = 5.0
    logits[1, _ids("API")] = 4.0
    logits[2, _ids(",")] = 5.0
    steered = constraint.constrain(logits, _ids(" Open", "x"))
    assert int(steered[0].argmax()) == _ids(" Open")[0]
    assert int(steered[1].argmax()) == _ids("API")[0] and steered[1, _ids("x")[0]] == float("-inf")
    assert torch.equal(steered[2], logits[2])
    assert constraint.generated == ""  # constrain reads the path; only advance moves on


def test_a_line_that_cannot_become_an_import_is_never_steered() -> None:
    constraint = ImportLineConstraint(ImportNames("x = ", TOOLSET.modules), TokenTexts(TEXTS))
    logits = torch.randn(2, len(TEXTS))
    assert constraint.constrain(logits, _ids("x")) is logits


# The file uses LlmAgent (which the workspace defines) and Path (which it does not) without importing them.
WANTED = ImportNames(
    "",
    NAMES.modules,
    relative_depth=1,
    wanted={".llm_agent": frozenset({"LlmAgent"}), ".": frozenset({"LlmAgent"})},
    wanted_elsewhere=frozenset({"Path"}),
)


@pytest.mark.parametrize(
    ("line", "ended", "fits"),
    [
        ("from .llm_agent import LlmAgent", True, True),
        ("from . import LlmAgent", True, True),
        ("from .llm_agent import Agent", True, False),  # exists, but the file does not use it
        ("from .ll", False, True),
        ("from .types", False, False),  # binds nothing the file uses
        ("from pathlib import Path", True, True),  # not a workspace module: a name none of its files defines
        ("from pathlib import Pa", False, True),
        ("from pathlib import LlmAgent", True, False),  # a workspace name is imported from the workspace
        ("from typing import Any", True, False),
        # A workspace module while a name comes from elsewhere: left to the broader rule (`import_line_fits`).
        ("from pkg.mod import Path", True, True),
        ("from pkg.m", False, True),
        ("from pkg import Path", True, True),
        ("from pa", False, True),
        ("from pathlib import  Path", True, False),  # spelled plainly, or left to the broader rule
        ("from pathlib import *", True, False),
        ("from .llm_agent import \\", False, False),
        ("from .llm_agent import (LlmAgent", False, False),
        # A comma with no missing name left to follow it: the line ends instead (a repeated name was the
        # only one that fit, and the repetition rule cut the line at the comma).
        ("from .llm_agent import LlmAgent,", False, False),
        ("from .llm_agent import LlmAgent, ", False, False),
        ("from pathlib import Path,", False, False),
        ("from pathlib import Path, Path", True, False),
        ("from typing import )", False, False),
        ("x = 1", True, True),  # other lines are not judged
        # The name begins with the token that brings its space: after a lone space the model is off its
        # own spelling and ended the text there (`from typing import ` where the file used `copy`).
        ("from pathlib import ", False, False),
        ("from .llm_agent import ", False, False),
        ("from pathlib import", True, False),
    ],
)
def test_which_lines_import_what_the_file_is_missing(line: str, ended: bool, fits: bool) -> None:
    assert wanted_import_fits(line, WANTED, ended) is fits


def test_a_name_after_a_comma_begins_with_its_space() -> None:
    two = ImportNames("", {}, 0, wanted_elsewhere=frozenset({"AsyncGenerator", "Iterator"}))
    assert wanted_import_fits("from collections.abc import AsyncGenerator,", two, ended=False)
    assert wanted_import_fits("from collections.abc import AsyncGenerator, It", two, ended=False)
    # a lone space, then the model wrote `contextmanager` after two spaces
    assert not wanted_import_fits("from collections.abc import AsyncGenerator, ", two, ended=False)


def test_nothing_wanted_from_elsewhere_keeps_a_line_in_the_workspace() -> None:
    only_here = ImportNames("", NAMES.modules, 1, wanted={".llm_agent": frozenset({"LlmAgent"})})
    assert not wanted_import_fits("from ab", only_here, ended=False)  # `abc` can hold none of it
    assert wanted_import_fits("from .", only_here, ended=False)


def test_the_missing_import_is_steered_first_and_another_import_is_followed() -> None:
    texts = [" .", "llm_agent", " import", " LlmAgent", " Agent", " abc"]
    names = ImportNames("from", NAMES.modules, 1, wanted={".llm_agent": frozenset({"LlmAgent"})})
    constraint = ImportLineConstraint(names, TokenTexts(texts))
    logits = torch.tensor([[1.0, 0.0, 0.0, 0.0, 0.0, 2.0]])  # the model would write `from abc`
    assert int(constraint.constrain(logits).argmax()) == texts.index(" .")
    constraint.advance([texts.index(" ."), texts.index("llm_agent"), texts.index(" import")])
    logits = torch.tensor(
        [[0.0, 0.0, 0.0, 1.0, 3.0, 0.0]]
    )  # it would import Agent, which the file does not use
    assert int(constraint.constrain(logits).argmax()) == texts.index(" LlmAgent")
    # A user who typed another name is followed: no token leads to a wanted import, so the broad rule applies.
    typed = ImportLineConstraint(
        ImportNames("from .llm_agent import Ag", NAMES.modules, 1, wanted=names.wanted),
        TokenTexts(["ent", "x"]),
    )
    logits = torch.tensor([[1.0, 2.0]])
    assert int(typed.constrain(logits).argmax()) == 0


def test_what_the_file_is_missing_from_its_workspace(tmp_path: Path) -> None:
    runner = _project(tmp_path)
    (tmp_path / "app" / "agents" / "helper.py").write_text("from .llm_agent import LlmAgent\n")
    text = (
        "from .llm_agent import LlmAgent\n\n\nclass Runner:\n    limit = LIMIT\n    path = Path(LlmAgent)\n"
    )
    document = new_document(runner.as_uri(), "python", 1, text)
    wanted, elsewhere = WorkspaceFiles([tmp_path]).wanted_imports(document, 0)
    # The line at the offset (the import of LlmAgent) is left out: LlmAgent is missing too.
    assert wanted["..config"] == {"LIMIT"}
    assert wanted[".llm_agent"] == {"LlmAgent"}
    assert ".runner" not in wanted  # the file itself is no source
    assert ".helper" not in wanted  # a module that imports the name in turn is none either
    assert elsewhere == {"Path"}
    # The package the file is in names nothing it imports: `agents` here is some other module's.
    package_named = new_document(runner.as_uri(), "python", 1, text + "    run = agents.run()\n")
    assert "agents" in WorkspaceFiles([tmp_path]).wanted_imports(package_named, 0)[1]
    assert "Runner" not in elsewhere  # the file defines it
    offset = text.index("class")
    wanted, elsewhere = WorkspaceFiles([tmp_path]).wanted_imports(document, offset)
    assert ".llm_agent" not in wanted and wanted["..config"] == {"LIMIT"}


def test_the_builder_hands_the_engine_the_missing_import(tmp_path: Path) -> None:
    runner = _project(tmp_path)
    ctx = context_at(
        runner, tmp_path, "from .llm_agent import LlmAgent\n<>\n\nclass Runner:\n    x = LIMIT\n"
    )
    assert ctx.import_names is not None
    assert ctx.import_names.wanted["..config"] == {"LIMIT"}


def test_a_line_importing_from_where_a_missing_name_is_goes_on_to_that_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("engine.imports.STEERED_CANDIDATES", 2)
    texts = [" Other", " Open", "API", "Tool", "set", "x"]
    names = ImportNames("from .m import", TOOLSET.modules, 1, wanted={".m": frozenset({"OpenAPIToolset"})})
    constraint = ImportLineConstraint(names, TokenTexts(texts))
    # Neither of the two best tokens begins the missing name: the tokens that spell it stay.
    logits = torch.tensor([[5.0, 0.0, 0.0, 0.0, 0.0, 4.0]])
    assert torch.isfinite(constraint.constrain(logits)[0]).tolist() == [t == " Open" for t in texts]
    assert wanted_endings("from .m import Open", names) == ["APIToolset"]
    assert wanted_endings("from .other import ", names) == []


def test_a_workspace_line_is_held_to_what_exists_while_a_missing_name_comes_from_elsewhere() -> None:
    texts = [" Thing", " Other"]
    names = ImportNames("from pkg.mod import", NAMES.modules, 1, wanted_elsewhere=frozenset({"Path"}))
    logits = torch.tensor([[1.0, 2.0]])
    steered = ImportLineConstraint(names, TokenTexts(texts)).constrain(logits)
    assert int(steered.argmax()) == 0 and steered[0, 1] == float("-inf")


def test_a_later_from_line_naming_what_the_workspace_lacks_ends_the_suggestion_before_it(
    tmp_path: Path,
) -> None:
    runner = _project(tmp_path)
    ctx = context_at(
        runner, tmp_path, "from .llm_agent import LlmAgent\nfrom .<>\n\nclass Runner:\n    pass\n"
    )
    rules = ctx.stop_rules
    assert rules is not None
    first = "llm_agent import Agent"
    invented = f"{first}\nfrom .utils import get_agent_name\n\nclass Manager:"
    assert rules.cut(invented, final=False) == len(first)
    assert "import" in rules.fired
    # Judged while it is written: `.u` leads to no module of the package.
    assert rules.cut(f"{first}\nfrom .u", final=False) == len(first)
    assert rules.cut(f"{first}\nfrom .llm_agent import Nothing", final=True) == len(first)
    assert rules.cut(f"{first}\r\nfrom ..config import Nothing\r\n", final=False) == len(first) + 1


def test_later_lines_that_exist_or_are_not_judged_are_kept(tmp_path: Path) -> None:
    runner = _project(tmp_path)
    ctx = context_at(runner, tmp_path, "from .llm_agent import LlmAgent\n<>\n\nclass Runner:\n    pass\n")
    rules = ctx.stop_rules
    assert rules is not None
    kept = [
        "import os\nfrom ..config import LIMIT, Settings\nfrom typing import Any\nimport json",
        "from .llm_agent import LlmAgent\nfrom .llm_agent import LlmAgent as Other\nfrom app.config import LIMIT",
        "from .llm_agent import LlmAgent\nfrom .llm_",  # still on its way to a module that exists
    ]
    for text in kept:
        assert rules.cut(text, final=False) is None, text
    assert (
        rules.cut("from .nothing import x\nimport os", final=False) is None
    )  # the first line: steered instead


def test_later_import_lines_are_judged_at_the_imports_whatever_the_first_line(tmp_path: Path) -> None:
    runner = _project(tmp_path)
    invented = "os\nfrom .utils import helper"
    at_imports = context_at(
        runner, tmp_path, "from .llm_agent import LlmAgent\nimport <>\n\nclass Runner:\n    pass\n"
    )
    assert at_imports.import_names is None  # `import ` never becomes a `from` line: nothing to steer
    assert at_imports.stop_rules is not None and at_imports.stop_rules.cut(invented, final=False) == 2
    in_body = context_at(runner, tmp_path, "from .llm_agent import LlmAgent\n\n\nclass Runner:\n    <>\n")
    assert in_body.stop_rules is not None and in_body.stop_rules.later_imports is None
    off = context_at(
        runner, tmp_path, "from .llm_agent import LlmAgent\n<>\n", ContextSettings(steer_imports=False)
    )
    assert off.stop_rules is not None and off.stop_rules.cut(invented, final=False) is None


def test_a_comma_fits_while_a_missing_name_is_left_for_it() -> None:
    two = ImportNames("", NAMES.modules, 1, wanted={".llm_agent": frozenset({"LlmAgent", "Agent"})})
    assert wanted_import_fits("from .llm_agent import LlmAgent,", two, ended=False)
    assert wanted_import_fits("from .llm_agent import LlmAgent, Ag", two, ended=False)
    assert not wanted_import_fits("from .llm_agent import LlmAgent, Agent,", two, ended=False)


def test_a_line_is_not_steered_into_ending_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    # The file uses `copy` (a module: `import copy`) and binds it nowhere; the model began `from typing import`.
    monkeypatch.setattr("engine.imports.STEERED_CANDIDATES", 3)
    texts = [" ", " Any", "<|endoftext|>", " copy", "Any"]
    end = texts.index("<|endoftext|>")
    names = ImportNames("from typing import", {}, 0, wanted_elsewhere=frozenset({"copy"}))
    constraint = ImportLineConstraint(names, TokenTexts(texts, excluded_ids=[end]))
    # None of the three best tokens imports `copy`: a lone space is no way there, so the model's own choice
    # stands, less the end of text, which would leave the line at `import`.
    logits = torch.tensor([[4.0, 5.0, 3.0, -9.0, -9.0]])
    steered = constraint.constrain(logits)
    assert int(steered.argmax()) == texts.index(" Any") and steered[0, end] == float("-inf")
    assert torch.isfinite(steered[0, : texts.index(" Any") + 1]).all()
    # Where the line already has its space, the end of text does not fit either; a name does.
    constraint.advance([texts.index(" ")])
    steered = constraint.constrain(torch.tensor([[0.0, -1.0, 5.0, -9.0, 1.0]]))
    assert int(steered.argmax()) == texts.index("Any")
    # A line with a name may end with the text.
    done = ImportLineConstraint(ImportNames("from typing import Any", {}, 0), TokenTexts(texts, [end]))
    assert int(done.constrain(torch.tensor([[0.0, 1.0, 5.0, -9.0, 0.0]])).argmax()) == end


# The file uses the standard `copy` module whole (`copy.deepcopy`) and does not import it.
WHOLE = ImportNames("", NAMES.modules, 1, wanted_modules=frozenset({"copy"}))


@pytest.mark.parametrize(
    ("line", "ended", "fits"),
    [
        ("", False, True),
        ("im", False, True),
        ("import", False, True),
        ("import co", False, True),
        ("import copy", True, True),
        ("import copy as cp", True, True),
        ("import copy  # why", True, True),
        ("import json", True, False),  # not what the file misses
        ("import ", False, False),  # the name begins with the token that brings its space
        ("import", True, False),
        ("import copy, json", True, False),
        ("importx", False, False),
        ("fr", False, False),  # nothing else is missing: no `from` line imports it
        ("from typing import Any", True, False),
        ("try:", True, False),  # another statement where an import is missing
        ("", True, False),
        ("    import copy", True, True),
    ],
)
def test_which_lines_import_a_standard_module_the_file_uses_whole(line: str, ended: bool, fits: bool) -> None:
    assert wanted_import_fits(line, WHOLE, ended) is fits


def test_a_module_wanted_whole_beside_a_missing_name_leaves_both_ways_open() -> None:
    both = ImportNames(
        "", NAMES.modules, 1, wanted_elsewhere=frozenset({"Path"}), wanted_modules=WHOLE.wanted_modules
    )
    assert wanted_import_fits("fr", both, ended=False) and wanted_import_fits("import co", both, ended=False)
    assert wanted_import_fits("from pathlib import Path", both, ended=True)
    assert wanted_endings("import", WHOLE) == [" copy"] and wanted_endings("import co", WHOLE) == ["py"]
    assert wanted_endings("import copy", WHOLE) == []


def test_the_line_is_steered_to_import_the_module_the_file_uses_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("engine.imports.STEERED_CANDIDATES", 2)
    texts = ["from", "import", " typing", " copy", " json", "\n"]
    constraint = ImportLineConstraint(WHOLE, TokenTexts(texts))
    # The model would begin `from typing import ...`; the file misses only `copy`, which no `from` line brings.
    steered = constraint.constrain(torch.tensor([[5.0, 4.0, 0.0, 0.0, 0.0, 1.0]]))
    assert int(steered.argmax()) == texts.index("import") and steered[0, texts.index("from")] == float("-inf")
    constraint.advance([texts.index("import")])
    # Neither of its two best names is `copy`: the tokens that spell it stay.
    steered = constraint.constrain(torch.tensor([[0.0, 0.0, 0.0, -3.0, 5.0, 4.0]]))
    assert int(steered.argmax()) == texts.index(" copy")
    constraint.advance([texts.index(" copy"), texts.index("\n")])
    logits = torch.randn(1, len(texts))
    assert constraint.constrain(logits) is logits  # the line ended: nothing more to steer
    # A user who typed another import is followed.
    typed = ImportLineConstraint(
        ImportNames("import j", NAMES.modules, 1, wanted_modules=WHOLE.wanted_modules),
        TokenTexts(["son", "x"]),
    )
    assert int(typed.constrain(torch.tensor([[2.0, 1.0]])).argmax()) == 0


def test_standard_modules_the_file_uses_whole() -> None:
    text = "x = copy.deepcopy(y)\nz = re.compile('a')\nt = types.Content()\nn = os(1)\nw = weird.thing\n"
    # `types` reads an attribute the standard module lacks (google.genai's `types`); `os` is called, not
    # dotted into; `weird` is no standard module.
    assert standard_modules_used(text, ["copy", "re", "types", "os", "weird"]) == {"copy", "re"}
    assert dotted_uses("a = copy.copy(b)\ncopy .deepcopy(c)", "copy") == {"copy", "deepcopy"}
    assert dotted_uses("a = copy(b)", "copy") is None
    assert dotted_uses("import copy\n# copy.deepcopy\n", "copy") is None  # only in an import and a comment


def test_the_builder_asks_for_a_standard_module_the_file_uses_whole(tmp_path: Path) -> None:
    runner = _project(tmp_path)
    body = "\n\nclass Runner:\n    def clone(self):\n        return copy.deepcopy(LlmAgent())\n"
    ctx = context_at(runner, tmp_path, "from .llm_agent import LlmAgent\n<>" + body)
    assert ctx.import_names is not None and ctx.import_names.wanted_modules == {"copy"}
    assert "copy" not in ctx.import_names.wanted_elsewhere
    typed = context_at(runner, tmp_path, "from .llm_agent import LlmAgent\nimport <>" + body)
    assert typed.import_names is not None and typed.import_names.line_start == "import "
    # With nothing used whole, an `import` line is not steered, as before.
    plain = "from .llm_agent import LlmAgent\nimport <>\n\nclass Runner:\n    pass\n"
    assert context_at(runner, tmp_path, plain).import_names is None
    # Off with steerImports.
    off = ContextSettings(steer_imports=False)
    assert (
        context_at(runner, tmp_path, "from .llm_agent import LlmAgent\n<>" + body, off).import_names is None
    )
