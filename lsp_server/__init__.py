"""specls language server: LSP and text. Never imports torch."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("specls")  # pyproject.toml is the one place the version is written
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"
