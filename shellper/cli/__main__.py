"""``python -m shellper.cli``: the CLI without the console script (and without its prefork)."""

import sys

from shellper.cli.main import main

sys.exit(main())
