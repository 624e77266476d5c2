"""`specls bench lines-imports`: how many `from` lines a `specls bench lines` result suggested that name a module
or a name its workspace does not have.

An import line that names what does not exist is wrong however close it looks (`from .llm_agent import
LLMAgent` where the module defines `LlmAgent`); the server steers `from` lines at the imports to what the
workspace has (`steerImports`, `engine.imports`). This reads each result's first lines again against the
folders it was run on (each folder's parent is the workspace folder, as in `specls bench lines`) and counts
the `from` lines it can judge: relative imports and imports of the workspace's own packages. The folders must
hold the files the run read. Reading only; no model runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.metrics import code_cell, markdown_table

NAME = "lines-imports"
HELP = "count the from-lines a `bench lines` result suggested that name what its workspace lacks"


def judge_result(result: dict[str, Any]) -> tuple[int, list[tuple[str, str]]]:
    """(the `from` lines of the workspace among the result's first lines, those naming what it lacks as
    (position, line))."""
    from engine.api import ImportNames
    from engine.imports import import_line_fits, judged_from_line
    from lsp_server.context.workspace import WorkspaceFiles
    from lsp_server.documents import new_document

    folders = [Path(folder) for folder in result["config"]["folders"]]
    roots = sorted({folder.resolve().parent for folder in folders})
    workspace = WorkspaceFiles(roots)
    judged, lacking = 0, []
    for outcome in result["models"][0]["outcomes"]:
        line = outcome["suggestion"].split("\n")[0]
        relative = outcome["position"].rsplit(":", 1)[0]
        on_disk = [root / relative for root in roots if (root / relative).is_file()]
        if not on_disk:
            continue
        path = on_disk[0]
        found = workspace.import_names(new_document(path.as_uri(), "python", 1, path.read_text()))
        if found is None:
            continue
        names = ImportNames("", found[0], found[1])
        if not judged_from_line(line, names):
            continue
        judged += 1
        if not import_line_fits(line, names, ended=True):
            lacking.append((outcome["position"], line))
    return judged, lacking


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", type=Path, help="`specls bench lines` JSON results")


def command(args: argparse.Namespace) -> int:
    rows = []
    for path in args.results:
        judged, lacking = judge_result(json.loads(path.read_text()))
        rows.append([code_cell(path.name), str(judged), str(len(lacking))])
        for position, line in lacking:
            print(f"{path.name}: {position}: {line}")
    print(markdown_table(["result", "from-lines of the workspace", "naming what it lacks"], rows))
    return 0
