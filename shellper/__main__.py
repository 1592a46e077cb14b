"""``python -m shellper``: the CLI, as the ``shellper`` command (without the console script's prefork)."""

import sys

from shellper.cli.main import main

sys.exit(main())
