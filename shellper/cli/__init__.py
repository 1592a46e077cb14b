"""The ``shellper`` command: its subcommands, ``attach`` (the terminal's side), the demo.
Empty on purpose: ``shellper attach`` imports shellper.cli.attach alone (see shellper.cli.entry)."""
