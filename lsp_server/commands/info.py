"""`specls info`: the resolved target and draft (paths, sizes on disk, parameter counts)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", help="target model: a local folder or hub id (default: bundled)")
    parser.add_argument("--draft", help="draft model: a local folder or hub id (default: bundled)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from engine.models import ModelLoadError, Role, describe_model, resolve_model_path

    report: dict[str, Any] = {}
    status = 0
    roles: tuple[Role, ...] = ("target", "draft")
    for role in roles:
        try:
            report[role] = describe_model(resolve_model_path(getattr(args, role), role))
        except ModelLoadError as exc:
            report[role] = {"error": str(exc)}
            status = 1
    if args.json:
        print(json.dumps(report))
        return status
    for name, info in report.items():
        if "error" in info:
            print(f"{name}: {info['error']}", file=sys.stderr)
            continue
        print(f"{name}: {info['location']}")
        if info.get("local"):
            print(f"  {info.get('model_type')}, {info['params']:,} params, {info['bytes']:,} bytes on disk")
            print(f"  context {info.get('context_length')}")
        else:
            print("  hub id (downloaded on first use)")
    return status
