"""`specls serve`: run the language server on stdio (default) or TCP."""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import sys
from typing import Any

from engine.api import QUANTIZATIONS, RUNTIMES
from lsp_server.app.commands.model_args import add_model_arguments
from lsp_server.config import BACKENDS
from lsp_server.secrets import RedactingFormatter


def add_arguments(parser: argparse.ArgumentParser) -> None:
    transport = parser.add_argument_group("transport")
    transport.add_argument("--tcp", action="store_true", help="listen on TCP instead of stdio")
    # vscode-languageclient (TransportKind.stdio) and other clients append --stdio; it is the default.
    transport.add_argument("--stdio", action="store_true", help="talk over stdin/stdout (the default)")
    transport.add_argument("--host", default="127.0.0.1", help="TCP address to bind (default: 127.0.0.1)")
    transport.add_argument("--port", type=int, default=2087, help="TCP port (default: 2087)")
    transport.add_argument(
        "--token-file",
        help="TCP: the token file (default: $XDG_RUNTIME_DIR/specls/tcp-PORT.token, else in the cache "
        "folder); an existing private file is used as it is, else a fresh token is written there",
    )
    model = parser.add_argument_group("model (overrides the editor's settings)")
    model.add_argument("--backend", choices=BACKENDS)
    add_model_arguments(model, dtype_default=None)
    model.add_argument("--device", help="auto, cpu, cuda, ...")
    model.add_argument("--runtime", choices=RUNTIMES, help="what decodes the target (default: auto)")
    model.add_argument(
        "--quantize",
        choices=("auto", *QUANTIZATIONS),
        help="torch runtime: w8a8 (int8 weights and activations), int8 or int4 weight-only (default: auto, "
        "w8a8 on a CPU without native bf16)",
    )
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
        ("runtime", "runtime"),
        ("quantize", "quantize"),
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
    """Serve until the client leaves; the process ends here, with the LSP exit code (transport.py)."""
    try:
        settings = cli_settings(args)
    except (OSError, ValueError) as exc:  # a --fake-rules file that cannot be read
        return _fail(f"--fake-rules {args.fake_rules}: {_reason(exc)}")
    try:
        handler: logging.Handler = (
            logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler(sys.stderr)
        )
    except OSError as exc:
        return _fail(f"--log-file {args.log_file}: {_reason(exc)}")
    # Without a log file, warnings go to stderr (editors show it); never to stdout, the protocol's channel.
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=args.log_level if args.log_file else logging.WARNING, handlers=[handler])
    logging.getLogger("pygls").setLevel(logging.WARNING)

    from lsp_server.server import create_server
    from lsp_server.transport import exit_process, serve_stdio

    if not args.tcp:
        exit_process(serve_stdio(create_server(settings)))
    exit_process(_serve_tcp(args, settings))
    return 0  # not reached


def _serve_tcp(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    from lsp_server.auth import TokenError, server_token, write_token
    from lsp_server.backends import create_backend
    from lsp_server.backends.shared import SharedBackends
    from lsp_server.server import create_server
    from lsp_server.transport import serve_tcp

    try:
        token, token_path, made = server_token(args.token_file, args.port)
    except TokenError as exc:
        return _fail(str(exc))
    shared = SharedBackends(create_backend)
    written = False

    def listening(where: str) -> None:
        nonlocal written
        if made:  # only now that the port is ours: a server that cannot listen leaves the file alone
            write_token(token_path, token)
            written = True
        print(f"specls: listening on {where}; clients send the token in {token_path}", file=sys.stderr)

    try:
        return serve_tcp(
            lambda: create_server(settings, shared.factory),
            args.host,
            args.port,
            token,
            token_path,
            listening,
        )
    except TokenError as exc:
        return _fail(str(exc))
    except OSError as exc:
        reason = "address already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        return _fail(f"cannot listen on {args.host}:{args.port}: {reason}")
    finally:
        if written:
            with contextlib.suppress(OSError):
                token_path.unlink()


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _fail(message: str) -> int:
    print(f"specls serve: error: {message}", file=sys.stderr)
    return 2
