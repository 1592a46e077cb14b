"""``python -m shellper.daemon NAME DIR``: the detached session process; its argv names it for ``ps``."""

import os

from shellper.daemon.main import daemon_main

# os._exit: the intermediate process only forks the daemon (which never returns here), and its launcher
# waits for it; the interpreter's teardown would be time on that wait and nothing else.
os._exit(daemon_main([]))
