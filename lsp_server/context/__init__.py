"""Completion context: FIM prompts, snippets, completion mode, stop rules and draft-length policy."""
