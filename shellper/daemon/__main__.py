"""``python -m shellper.daemon NAME DIR``: the detached session process; its argv names it for ``ps``."""

import sys

from shellper.daemon.main import daemon_main

sys.exit(daemon_main(sys.argv[1:]))
