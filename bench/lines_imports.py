"""`specls bench lines-imports`: how many `from` lines a `specls bench lines` result suggested that name a module
or a name its workspace does not have, as a suggestion's first line and as its later lines.

An import line that names what does not exist is wrong however close it looks (`from .llm_agent import
LLMAgent` where the module defines `LlmAgent`); the server steers `from` lines at the imports to what the
workspace has (`steerImports`, `engine.imports`). This reads each result's first lines again against the
folders it was run on (each folder's parent is the workspace folder, as in `specls bench lines`) and counts
the `from` lines it can judge: relative imports and imports of the workspace's own packages. The first line is
steered while it is written; a later one that names what the workspace lacks ends the suggestion before it
(stop rule 2b), so later lines count in a run without `--first-line`. The folders must
hold the files the run read. Reading only; no model runs.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.metrics import code_cell, markdown_table

NAME = "lines-imports"
HELP = "count the from-lines a `bench lines` result suggested that name what its workspace lacks"


@dataclass
class Judged:
    """The `from` lines of the workspace among some lines of a result's suggestions, and those naming what it
    lacks as (position, line)."""

    judged: int = 0
    lacking: list[tuple[str, str]] = field(default_factory=list)


def judge_result(result: dict[str, Any]) -> tuple[Judged, Judged]:
    """The result's first lines and its later lines, judged."""
    from engine.api import ImportNames
    from engine.imports import import_line_fits, judged_from_line
    from lsp_server.context.workspace import WorkspaceFiles
    from lsp_server.documents import new_document

    folders = [Path(folder) for folder in result["config"]["folders"]]
    roots = sorted({folder.resolve().parent for folder in folders})
    workspace = WorkspaceFiles(roots)
    first, later = Judged(), Judged()
    for outcome in result["models"][0]["outcomes"]:
        relative = outcome["position"].rsplit(":", 1)[0]
        on_disk = [root / relative for root in roots if (root / relative).is_file()]
        if not on_disk:
            continue
        path = on_disk[0]
        found = workspace.import_names(new_document(path.as_uri(), "python", 1, path.read_text()))
        if found is None:
            continue
        names = ImportNames("", found[0], found[1])
        for index, line in enumerate(outcome["suggestion"].split("\n")):
            if not judged_from_line(line, names):
                continue
            counted = later if index else first
            counted.judged += 1
            if not import_line_fits(line, names, ended=True):
                counted.lacking.append((outcome["position"], line))
    return first, later


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", type=Path, help="`specls bench lines` JSON results")


def command(args: argparse.Namespace) -> int:
    rows = []
    for path in args.results:
        first, later = judge_result(json.loads(path.read_text()))
        row = [code_cell(path.name)]
        for place, judged in (("first", first), ("later", later)):
            row += [str(judged.judged), str(len(judged.lacking))]
            for position, line in judged.lacking:
                print(f"{path.name}: {position} ({place} line): {line}")
        rows.append(row)
    headers = ["result", "first from-lines of the workspace", "naming what it lacks"]
    headers += ["later from-lines of the workspace", "naming what it lacks"]
    print(markdown_table(headers, rows))
    return 0
