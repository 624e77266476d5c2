"""The model flags' old import path for the app's commands: they live in `lsp_server.model_args`, which the
benchmarks import too."""

from lsp_server.model_args import DRAFT_HELP, DTYPE_HELP, TARGET_HELP, add_model_arguments

__all__ = ["DRAFT_HELP", "DTYPE_HELP", "TARGET_HELP", "add_model_arguments"]
