"""``shellper --host H COMMAND ...`` and ``shellper COMMAND HOST:NAME ...``: the same command, run by the
``shellper`` of host H over its shared ssh connection (shellper.host.ssh), after checking that it is this
version. ``attach`` gets a terminal there (``ssh -t``): the same keys, resize and replay as at home.

This module imports only os, sys and the error base at first: the console script asks :func:`remote_host`
before anything else.
"""

from __future__ import annotations

import os
import sys

from shellper.cli.argscan import NO_SESSION_OPERANDS
from shellper.core.errors import ShellperError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable

    from shellper.cli.argscan import Scan


class MixedHosts(ShellperError):
    """``ls`` of several hosts in one command (``ls a: b:``): their lists would run together."""


def _names(line: Scan) -> list[str]:
    """The operands that name sessions: all of stop's, the first of the others' (``ls`` has none)."""
    if line.command == "stop":
        return list(line.operands)
    if line.command in (None, "ls") or line.command in NO_SESSION_OPERANDS:
        return []
    return line.operands[:1]


def _host_of(name: str) -> str | None:
    """The host ``HOST:NAME`` names (validated, as is NAME), None for a plain name."""
    from shellper.core.names import validate_host, validate_name

    if ":" not in name:
        return None
    host, _, session = name.partition(":")
    validate_name(session)
    return validate_host(host)


def hosts_of_names(line: Scan) -> dict[str | None, list[str]]:
    """``stop``'s names by where they are (None: here), in the order first named; a single entry unless the
    names are on several hosts (``stop box:r2 l2``: r2 on box, l2 here). ``--host`` puts them all there."""
    if line.command != "stop" or "--host" in line.options or "--host" in line.missing:
        return {}
    groups: dict[str | None, list[str]] = {}
    for name in line.operands:
        groups.setdefault(_host_of(name), []).append(name)
    return groups


def remote_host(line: Scan) -> str | None:
    """The host a command line is for: ``--host H``, else the ``HOST:`` of its session names (``ls HOST:``
    lists HOST's); None: here. Session names have no ``:`` (shellper.core.names), so one in a name always
    names a host. A host that is no ssh destination shellper uses, or a ``HOST:`` with no name after it,
    raises BadHost or BadName (shellper.core.names): nothing runs, here or there. A ``--host`` given without
    a value (the next word looked like an option) is refused too, rather than read as "here". Names on
    several hosts (only ``stop`` takes several) are split by :func:`hosts_of_names` first."""
    from shellper.core.names import BadHost, validate_host

    host = line.options.get("--host")
    if isinstance(host, str):
        return validate_host(host)
    if host is not None or "--host" in line.missing:
        raise BadHost("", "--host needs a value")
    if line.command == "ls" and line.operands and all(op.endswith(":") for op in line.operands):
        listed = {validate_host(op[:-1]) for op in line.operands}
        if len(listed) > 1:
            raise MixedHosts(f"ls: one host at a time ({', '.join(sorted(listed))}): their lists would run "
                             "together")
        return listed.pop()
    hosts = {_host_of(name) for name in _names(line)} - {None}
    return hosts.pop() if len(hosts) == 1 else None


def per_host_main(argv: list[str], line: Scan, groups: dict[str | None, list[str]], local: Callable[[list[str]], int]
                  ) -> int:
    """``stop`` of names on several hosts: each host's names stopped there (its ssh command run alongside the
    others'), the plain ones here by ``local``; 1 if any part failed."""
    import subprocess

    from shellper.cli.argscan import scan
    from shellper.host.ssh import SshError, check_version, remote_shellper, ssh_argv

    everyone = [name for names in groups.values() for name in names]

    def only(names: list[str]) -> list[str]:
        others = list(everyone)
        for name in names:
            others.remove(name)
        out: list[str] = []
        for token in argv:
            if token in others:
                others.remove(token)
            else:
                out.append(token)
        return out

    running: list[subprocess.Popen[bytes]] = []
    failed = False
    for host, names in groups.items():
        if host is None:
            continue
        part = only(names)
        try:
            check_version(host, say=_say)
            command = ssh_argv(host, remote_shellper(remote_argv(part, scan(part), host)), batch=False)
        except SshError as exc:
            print(f"shellper: {exc}", file=sys.stderr)
            failed = True
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            running.append(subprocess.Popen(command, stdin=subprocess.DEVNULL))
        except OSError as exc:
            print(f"shellper: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr)
            failed = True
    if None in groups:
        failed |= local(only(groups[None])) != 0
    for proc in running:
        failed |= proc.wait() != 0
    return 1 if failed else 0


def _say(message: str) -> None:
    """A line for the person waiting (installing shellper on a host takes a few seconds)."""
    print(f"shellper: {message}", file=sys.stderr, flush=True)


def remote_argv(argv: list[str], line: Scan, host: str) -> list[str]:
    """``argv`` for the remote shellper: without ``--host`` and with ``HOST:`` taken off the session names
    (before ``--``: what follows is the child's own)."""
    names = _names(line)  # in order: a later operand with the same text (send's TEXT) stays as typed
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token == "--":
            out += argv[i - 1:]
            break
        if token == "--host":
            i += 1
            continue
        if token.startswith("--host="):
            continue
        if line.command == "ls" and token == f"{host}:" and token in line.operands:
            continue
        if names and token == names[0]:
            names.pop(0)
            if token.startswith(f"{host}:"):
                token = token[len(host) + 1:]
        out.append(token)
    return out


def with_attach_host(args: list[str], host: str) -> list[str]:
    """A remote ``run``'s ``args`` with ``--attach-host HOST`` right after the command word (where nothing
    can read it as the child's), so the line it prints says ``shellper attach HOST:NAME``, which works
    from here, rather than the remote's own ``shellper attach NAME``."""
    from shellper.cli.argscan import GLOBAL_OPTIONS

    i = 0
    while i < len(args) and args[i] != "--":
        token = args[i]
        if not token.startswith("-"):
            return [*args[:i + 1], "--attach-host", host, *args[i + 1:]] if token == "run" else args
        i += 2 if "=" not in token and GLOBAL_OPTIONS.get(token) else 1
    return args


def remote_main(argv: list[str], line: Scan, host: str) -> int:
    """Check the remote version, then become the ssh that runs the command there (its exit status is the
    remote command's, or 255 when ssh could not connect); ``attach`` and ``tail -f`` run it as a child
    instead, which says so when the connection is lost (shellper.cli.remoteterm)."""
    from shellper.host.ssh import SshError, check_version, remote_shellper, ssh_argv

    args = remote_argv(argv, line, host)
    if line.command == "run" and line.exact:
        args = with_attach_host(args, host)
    try:
        check_version(host, say=_say)  # starts the host's shared connection (and installs shellper), if need be
        # a terminal there for attach, and for tail -f: closing it hangs the remote command up when ssh ends
        follows = line.command == "tail" and ("--follow" in line.options or "-f" in line.options)
        tty = (line.command == "attach" or follows) and os.isatty(0) and os.isatty(1)
        command = ssh_argv(host, remote_shellper(args), tty=tty, batch=False)
    except SshError as exc:
        print(f"shellper: {exc}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    if line.command == "attach" or follows:  # long-lived: a lost connection is said (shellper.cli.remoteterm)
        from shellper.cli.remoteterm import run_watched

        return run_watched(command, host, tty)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"shellper: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    raise AssertionError("unreachable: exec returned")
