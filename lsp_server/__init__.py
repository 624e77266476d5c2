"""specls language server: LSP and text. Never imports torch."""
