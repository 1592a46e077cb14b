"""The ``shellper`` console script: a plain attach (and a plain run where a warm launcher listens) without argparse,
else a prefork (for ``run``) and the CLI.

Like :mod:`shellper.daemon.prefork` and :mod:`shellper.cli.argscan` (with the option table it reads), this
imports only os and sys at first, so the prefork is started before any of the package's other imports (the
prefork's module only when one is started: the quick paths need none).
"""

from __future__ import annotations

import os
import sys

from shellper.cli.argscan import Scan, may_detach, names_a_host, scan


def entry() -> None:
    """The console script: run the CLI, then leave without the interpreter's teardown, which costs more
    than a short command's own work (bench/NOTES.md, "Start-up: what the avoided imports cost")."""
    argv = sys.argv[1:]
    line = scan(argv)
    code: int | str | None = None
    if names_a_host(line):  # maybe another host's command: nothing here to hurry (shellper.cli.onhost decides)
        from shellper.cli.main import main

        _leave(main(argv))
    if line.command == "bridge" and line.exact and len(line.operands) == 1 and line.child is None \
            and not {"-h", "--help"}.intersection(line.options):  # every remote connection starts one
        from shellper.client.bridge import quick_main as bridge_main

        directory = line.options.get("--dir")
        _leave(bridge_main(directory if isinstance(directory, str) else None, line.operands[0]))
    if line.command == "legacy-main" and line.exact and len(line.operands) == 1 and not line.options \
            and line.child is None:  # its argv holds the Tower's config, env and all, until it re-executes
        from shellper.daemon.legacymain import legacy_main

        _leave(legacy_main(line.operands))
    if line.command == "attach":  # the command people wait on: started without argparse when it is plain
        from shellper.cli.commands.attach import quick_main

        code = quick_main(line)
        if code is not None:
            _leave(code)
    listens = may_detach(line) and _launcher_listens(line)
    if listens:  # the launcher forks the session: a plain run needs no parser either
        from shellper.cli.commands.run import quick_main as run_main

        code = run_main(line)
        if code is not None:
            _leave(code)
    prefork = None
    if may_detach(line) and not listens:  # imported here: a quick path that returned needed none (nor signal)
        from shellper.daemon.prefork import Prefork

        prefork = Prefork.start(_label(line))
    try:
        from shellper.cli.main import main

        code = main(argv, prefork=prefork)
    except SystemExit as exc:
        code = exc.code
    finally:
        if prefork is not None:
            prefork.cancel()
    _leave(code)


def _label(line: Scan) -> tuple[str, ...]:
    """The prefork's argv after ``python -m shellper.daemon``, for ``ps``: the session's name and ``--dir``
    as far as the scan tells (a guess until argparse has read the line), never another argument; nothing
    when the scan is unsure which operand is the name (an unknown option might take a value)."""
    if not line.exact:
        return ()
    directory = line.options.get("--dir")
    return (*line.operands[:1], *((directory,) if isinstance(directory, str) else ()))


def _launcher_listens(line: Scan) -> bool:
    """Whether the runtime directory the scan names (else the default one) has a warm launcher's socket
    (shellper.client.warm): then launch() uses it, and a prefork would be started for nothing."""
    if os.environ.get("SHELLPER_LAUNCHER", "").lower() in ("off", "0", "no", "false"):  # warmstart.enabled
        return False
    from shellper.core.names import runtime_dir_name

    directory = line.options.get("--dir")
    try:
        return os.path.exists(os.path.join(runtime_dir_name(directory if isinstance(directory, str) else None),
                                           ".launcher.sock"))  # warmstart.SOCKET_NAME
    except OSError:
        return False


def _leave(code: int | str | None) -> None:
    """Flush and exit without the interpreter's teardown."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # `shellper ls | head`: the reader has all it wanted (shellper.cli.main.SIGPIPE_STATUS)
        code = code or 128 + 13
    except (OSError, AttributeError) as exc:  # stdout full (>/dev/full) or closed (>&-): say so, not a traceback
        try:  # noqa: SIM105 - contextlib is not loaded yet, and need not be
            os.write(2, f"shellper: cannot write the output: {exc}\n".encode())
        except OSError:
            pass
        code = code or 1
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    os._exit(code or 0)
