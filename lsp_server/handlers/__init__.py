"""The LSP handlers, one function per method, grouped by what they serve: the server's lifecycle, the
documents, the completions and the user's feedback on them. Each translates between LSP and the scheduler
or the document store and does nothing else; `server.py` registers them."""
