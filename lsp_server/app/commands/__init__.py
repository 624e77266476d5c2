"""One module per `specls` subcommand."""
