"""The TCP server's token: a random secret in a file only the user can read (mode 0600).

Any local process can connect to a localhost port, but only the user's own can read the file; a connection
proves it is one of those by sending the token in `initialize` (`initializationOptions.token`). The default
file is per port, under `$XDG_RUNTIME_DIR/specls/` (a per-user tmpfs) or else the specls cache folder;
`--token-file PATH` names another: an existing, private one is used as it is, else a fresh token is written.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path


class TokenError(RuntimeError):
    """The token file cannot be made or used; the message says which file and why."""


def default_token_path(port: int) -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "specls" / f"tcp-{port}.token"
    configured = os.environ.get("SPECLS_CACHE_DIR")
    cache = Path(os.path.expanduser(configured)) if configured else Path.home() / ".cache" / "specls"
    return cache / f"tcp-{port}.token"


def write_token(path: Path, token: str | None = None) -> str:
    """`token` (default: a fresh one), written to `path` with mode 0600 (its folder 0700 when made here)."""
    token = token or secrets.token_urlsafe(32)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = path.with_name(path.name + f".{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(token + "\n")
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except OSError as exc:
        raise TokenError(f"cannot write the token file {path}: {exc.strerror or exc}") from exc
    return token


def read_token(path: Path) -> str:
    """The token in an existing file, which must be private to its owner."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenError(f"cannot read the token file {path}: {exc}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenError(f"the token file {path} is readable by others: run `chmod 600 {path}`")
    if len(text) < 16:
        raise TokenError(f"the token in {path} is too short (16 characters at least)")
    return text


def server_token(token_file: str | None, port: int) -> tuple[str, Path, bool]:
    """(token, its file, whether this process is to write the file and so remove it at exit). A fresh token is
    not written here: the caller writes it (`write_token(path, token)`) once it listens, so that a server
    that cannot listen (a busy port) never touches the file of the server that can."""
    if token_file:
        path = Path(os.path.expanduser(token_file))
        if path.is_file() and path.stat().st_size > 0:
            return read_token(path), path, False
        return secrets.token_urlsafe(32), path, True
    return secrets.token_urlsafe(32), default_token_path(port), True
