"""`specls info`: the resolved target and draft (paths, sizes on disk, parameter counts, FIM or not) and the
dtype the engine would run them in."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from lsp_server.app.commands.model_args import add_model_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, ... (for the dtype rule)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from engine.models import (
        NO_DRAFT,
        ModelLoadError,
        Role,
        choose_dtype,
        cpu_bf16_support,
        default_draft,
        describe_model,
        pick_device,
        resolve_model_path,
    )
    from lsp_server.context.fim import detect_fim_template

    report: dict[str, Any] = {}
    status = 0
    draft = args.draft if args.draft is not None else default_draft(args.target)
    roles: tuple[tuple[Role, str | None], ...] = (("target", args.target), ("draft", draft))
    for role, spec in roles:
        if role == "draft" and spec == NO_DRAFT:
            report[role] = None
            continue
        try:
            info = describe_model(resolve_model_path(spec, role))
        except ModelLoadError as exc:
            report[role] = {"error": str(exc)}
            status = 1
            continue
        specials = info.pop("special_tokens", None)
        if specials is not None:
            template = detect_fim_template(specials)
            info["fim"] = template.name if template else None
        report[role] = info
    target = report["target"]
    if "error" not in target:
        try:
            params = target.get("params")
            name, reason = choose_dtype(args.dtype, pick_device(args.device).type, params, cpu_bf16_support())
            report["dtype"] = {"name": name, "reason": reason}
        except ModelLoadError as exc:
            report["dtype"] = {"error": str(exc)}
            status = 1
    if args.json:
        print(json.dumps(report))
        return status
    for name in ("target", "draft"):
        info = report[name]
        if info is None:
            print(f"{name}: none (lookup, suffix and stale drafting only)")
            continue
        if "error" in info:
            print(f"{name}: {info['error']}", file=sys.stderr)
            continue
        print(f"{name}: {info['location']}")
        if info.get("local"):
            print(f"  {info.get('model_type')}, {info['params']:,} params, {info['bytes']:,} bytes on disk")
            fim = f"FIM template {info['fim']}" if info.get("fim") else "no FIM tokens (prefix-only prompts)"
            print(f"  context {info.get('context_length')}, {fim}")
        else:
            print("  hub id (downloaded on first use)")
    if "dtype" in report and "name" in report["dtype"]:
        print(f"dtype: {report['dtype']['name']} ({report['dtype']['reason']})")
    return status
