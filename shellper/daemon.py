"""``python -m shellper.daemon NAME DIR``: the detached session process (argv names it for ``ps``)."""

import sys

from shellper.launch import daemon_main

if __name__ == "__main__":
    sys.exit(daemon_main(sys.argv[1:]))
