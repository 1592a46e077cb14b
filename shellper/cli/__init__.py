"""The ``shellper`` command: its subcommands (``commands``, one module each), ``attach`` (the terminal's side),
the demo. Empty on purpose: the console script imports only what its command needs (see shellper.cli.entry)."""
