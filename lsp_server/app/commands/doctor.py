"""`specls doctor`: check the environment, say what is wrong and how to fix it; exit 1 on any problem.

Checks, in the order a problem in one makes the next pointless: Python, torch and its device, the pinned
library versions, the model pair (paths, sizes, tokenizer compatibility, FIM tokens), the tree-sitter
grammars, and finally a real `specls serve` answering one completion. `specls info --json` stays the
machine-readable description of the pair; this is for people.

This module runs the checks in that order and prints the report; the checks themselves live in
`doctor_environment.py`, `doctor_models.py` and `doctor_server.py`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from lsp_server.app.commands.doctor_environment import (
    INSTALL_FIX,
    Check,
    check_grammars,
    check_python,
    check_torch,
    check_versions,
    pinned_requirements,
)
from lsp_server.app.commands.doctor_models import (
    check_dtype,
    check_model_choice,
    check_model_pair,
    check_runtime,
)
from lsp_server.app.commands.doctor_server import check_server
from lsp_server.app.commands.model_args import add_model_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--device", default="auto", help="the device the server would use (default: auto)")
    parser.add_argument("--no-server", action="store_true", help="skip starting the server")
    parser.add_argument(
        "--server-timeout", type=float, default=300, help="seconds for the server to load and answer"
    )


def run(args: argparse.Namespace) -> int:
    checks: list[Check] = []

    def report(name: str, check: Callable[[], list[Check]]) -> None:
        try:
            new = check()
        except Exception as exc:  # a check that cannot even run (a missing package) is a problem to show
            new = [Check(name, "fail", f"the check itself failed: {type(exc).__name__}: {exc}", INSTALL_FIX)]
        for item in new:
            checks.append(item)
            print(format_check(item), flush=True)

    print("specls doctor")
    report("python", check_python)
    report("torch", lambda: check_torch(args.device))
    report("versions", lambda: check_versions(pinned_requirements()))
    target = args.target  # what the server would load: the checks below describe that model

    def model_choice() -> list[Check]:
        nonlocal target
        target, found = check_model_choice(args.target, args.draft, args.device)
        return found

    report("model", model_choice)
    report("model pair", lambda: check_model_pair(target, args.draft))
    report("dtype", lambda: check_dtype(target, args.device, args.dtype))
    report("runtime", lambda: check_runtime(target, args.device))
    report("tree-sitter grammars", check_grammars)
    if args.no_server:
        report("server", lambda: [Check("server", "skip", "not started (--no-server)")])
    elif any(check.status == "fail" for check in checks):
        report("server", lambda: [Check("server", "skip", "not started: fix the problems above first")])
    else:
        report(
            "server",
            lambda: check_server(args.target, args.draft, args.device, args.server_timeout, args.dtype),
        )
    problems = sum(check.status == "fail" for check in checks)
    warnings = sum(check.status == "warn" for check in checks)
    if problems:
        print(f"\n{problems} problem{'s' if problems > 1 else ''} found; see the fixes above.")
        return 1
    print(f"\neverything looks fine{f' ({warnings} warnings)' if warnings else ''}.")
    return 0


def format_check(check: Check) -> str:
    label = {"ok": "ok  ", "warn": "warn", "fail": "FAIL", "skip": "skip"}[check.status]
    lines = [f"  {label}  {check.name}: {check.detail}"]
    if check.fix:
        lines.append(f"        fix: {check.fix}")
    return "\n".join(lines)
