"""`specls serve`: run the language server on stdio (default) or TCP."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from lsp_server.commands.model_args import add_model_arguments
from lsp_server.secrets import RedactingFormatter


def add_arguments(parser: argparse.ArgumentParser) -> None:
    transport = parser.add_argument_group("transport")
    transport.add_argument("--tcp", action="store_true", help="listen on TCP instead of stdio")
    # vscode-languageclient (TransportKind.stdio) and other clients append --stdio; it is the default.
    transport.add_argument("--stdio", action="store_true", help="talk over stdin/stdout (the default)")
    transport.add_argument("--host", default="127.0.0.1", help="TCP address to bind (default: 127.0.0.1)")
    transport.add_argument("--port", type=int, default=2087, help="TCP port (default: 2087)")
    model = parser.add_argument_group("model (overrides the editor's settings)")
    model.add_argument("--backend", choices=("local", "openai", "fake"))
    add_model_arguments(model, dtype_default=None)
    model.add_argument("--device", help="auto, cpu, cuda, ...")
    model.add_argument("--endpoint", help="OpenAI-compatible base URL (with --backend openai)")
    model.add_argument("--model", dest="remote_model", help="model name at the endpoint")
    fake = parser.add_argument_group("fake backend (tests and client development)")
    fake.add_argument("--fake-token-delay-ms", type=float, help="delay per generated token")
    fake.add_argument("--fake-load-delay-ms", type=float, help="pretend loading takes this long")
    fake.add_argument(
        "--fake-rules", help='JSON file: [["trigger", "continuation"], ...] (see backends/fake.py)'
    )
    parser.add_argument("--log-file", help="write the server log here (stdout belongs to the protocol)")
    parser.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))


def cli_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The command-line flags as camelCase settings; they override what the editor sends."""
    settings: dict[str, Any] = {}
    for flag, key in (
        ("backend", "backend"),
        ("target", "target"),
        ("draft", "draft"),
        ("device", "device"),
        ("dtype", "dtype"),
        ("endpoint", "endpoint"),
        ("remote_model", "remoteModel"),
    ):
        if getattr(args, flag) is not None:
            settings[key] = getattr(args, flag)
    fake = {
        key: getattr(args, flag)
        for flag, key in (("fake_token_delay_ms", "tokenDelayMs"), ("fake_load_delay_ms", "loadDelayMs"))
        if getattr(args, flag) is not None
    }
    if args.fake_rules:
        with open(args.fake_rules, encoding="utf-8") as rules:
            fake["rules"] = json.load(rules)
    if fake:
        settings["fake"] = fake
    return settings


def run(args: argparse.Namespace) -> int:
    # Without a log file, warnings go to stderr (editors show it); never to stdout, the protocol's channel.
    handler: logging.Handler = (
        logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=args.log_level if args.log_file else logging.WARNING, handlers=[handler])
    logging.getLogger("pygls").setLevel(logging.WARNING)

    from lsp_server.server import create_server

    server = create_server(cli_settings(args))
    if args.tcp:
        server.start_tcp(args.host, args.port)
    else:
        server.start_io()
    return 0
