"""The typist: an LSP client that types files into `specls serve` the way a person does in VS Code (`replay`,
`client`, `keystrokes`), and what a person gets from it (`measures`). `specls demo` shows it; `specls bench
keystrokes` measures it. It lives apart from the app and from bench so both import it and neither imports
the other; the server proper never imports it."""
