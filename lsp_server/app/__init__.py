"""The application around the server: the `specls` command line, its commands (serve, pull, doctor, demo,
bench, train), the demo's replay client and its sample file. The server proper (`lsp_server/` outside this
folder) never imports it; tests/unit/test_seams.py keeps it so."""
