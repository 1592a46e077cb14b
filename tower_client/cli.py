"""``tower-client``: look at a runtime directory, reconcile it against a registry, find id holders, reap.

Exit status: 0 done, 1 something could not be done (refused, failed, survivors), 2 bad input (usage,
unreadable or invalid registry, bad name or session id, unsafe directory).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shellper import __version__
from shellper.core.defaults import DEFAULT_GRACE
from shellper.core.errors import ShellperError
from shellper.core.names import BadHost, validate_host
from shellper.core.owner import BadOwner, default_owner, validate_owner
from shellper.core.terminal.text import printable
from shellper.host.identity import IdentityError, ProcessGone
from shellper.host.paths import PathError, SessionPaths, runtime_dir
from shellper.host.record import AlreadyRunning, SessionRecord
from shellper.host.ssh import SshError
from shellper.host.survivors import reap_survivors
from tower_client.apply import (
    LeakedCgroup,
    OwnerBusy,
    apply,
    clean_session,
    remove_leaked_cgroups,
    terminate_session,
)
from tower_client.client import ClientError
from tower_client.discover import Observed, discover, observe
from tower_client.holders import BadSessionId, find_holders
from tower_client.hosts import HOST_TIMEOUT, names_host, reconcile_hosts
from tower_client.reconcile import (
    MAX_REGISTRY_BYTES,
    RegistryError,
    load_registry,
    name_mismatch,
    parse_registry,
    reconcile,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DRY_RUN_NOTE = "dry run: nothing was done; --apply carries out terminate and clean"


def _host(text: str) -> str:
    """``--host``: an ssh destination as shellper.core.names.validate_host accepts it, checked before
    anything runs."""
    try:
        return validate_host(text)
    except BadHost as exc:
        raise argparse.ArgumentTypeError(exc.reason) from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tower-client", description="Adopt or terminate shellper sessions.")
    p.add_argument("--version", action="version", version=f"tower-client (shellper) {__version__}")
    p.add_argument("--dir", help="runtime directory (default: $SHELLPER_DIR, $XDG_RUNTIME_DIR/shellper, "
                   "/tmp/shellper-UID)")
    p.add_argument("--owner", help="the owner this Tower acts for (default: $SHELLPER_OWNER, else the user "
                   "name); sessions of other owners are left alone")
    p.add_argument("--cgroup-parent", metavar="PATH", help="where session cgroups are looked for (default: "
                   "$SHELLPER_CGROUP_PARENT, else detected)")
    p.add_argument("--host", metavar="HOST", type=_host,
                   help="run the command on this ssh destination's tower-client, through its shared connection "
                   "(shellper --host's); a registry row's \"host\" does the same per session")
    p.add_argument("--host-timeout", type=float, default=HOST_TIMEOUT, metavar="S",
                   help=f"seconds each host has to answer (default {HOST_TIMEOUT:g}); one that does not gets "
                   "leave (host_unreachable) for its sessions")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("ls", help="what is in the runtime directory, verified")
    ls.add_argument("--json", action="store_true", help="JSON, for programs")
    rc = sub.add_parser("reconcile", help="decide adopt/terminate/respawn/clean/leave against a registry")
    rc.add_argument("--registry", required=True,
                    help='JSON file: {"sessions": [{"name": ..., "instance_id": ... or null, "host": ... or '
                    'absent}]}; - reads it from stdin')
    rc.add_argument("--apply", action="store_true", help="carry out terminate and clean (default: dry run)")
    rc.add_argument("--json", action="store_true", help="JSON, for programs")
    rc.add_argument("--husk-max-age", type=float, metavar="S",
                    help="terminate registered husks whose child exited more than S s ago")
    rc.add_argument("--grace", type=float, default=DEFAULT_GRACE, metavar="S",
                    help=f"SIGTERM-to-SIGKILL grace ({DEFAULT_GRACE:g})")
    ho = sub.add_parser("holders", help="live processes carrying a conversation/session id")
    ho.add_argument("session_id", help="the conversation/session id to look for in processes' argv")
    ho.add_argument("--reclaimable", action="append", default=[], metavar="NAME",
                    help="a session of the directory that may be ended to free the id (repeatable; default: "
                    "none, so every holder is foreign)")
    ho.add_argument("--json", action="store_true", help="JSON, for programs")
    rp = sub.add_parser("reap", help="identity-checked terminate of one session and its whole tree")
    rp.add_argument("name", help="the dead session to reap")
    rp.add_argument("--grace", type=float, default=DEFAULT_GRACE, metavar="S",
                    help=f"seconds between SIGTERM and SIGKILL (default {DEFAULT_GRACE:g})")
    rp.add_argument("--json", action="store_true", help="JSON, for programs")
    wa = sub.add_parser("watch", help="stream the owner's sessions' records and shellper exits as JSON lines, "
                        "until stdin ends (a Fleet's watch of another host: protocol/WATCH.md)")
    wa.add_argument("--watch-version", type=int, metavar="N",
                    help="the watch version the caller speaks (default: the one this tower-client serves; another "
                    "is refused with one line saying which)")
    sub.add_parser("launch", help="start a session from a SessionConfig's JSON on stdin and print its info and "
                   "record as one JSON line (a Fleet's launch on another host)")
    return p


def _emit(args: argparse.Namespace, data: Any, lines: list[str]) -> None:
    if args.json:
        print(json.dumps(data, indent=1, default=str))
    else:
        for line in lines:
            # a name, an owner or a reason read from a file, a process's argv: shown, never obeyed, by the terminal
            print(printable(line))


def _ls(args: argparse.Namespace, directory: Path) -> int:
    seen = discover(directory, cgroup_parent=args.cgroup_parent)
    rows = [f"{'NAME':20} {'STATE':10} {'PID':>8} {'IDENTITY':11} {'LOCK':6} {'SOCKET':9} {'CHILD':10} "
            f"{'CONTAINED':13} OWNER"]
    for o in seen:
        lock = {True: "held", False: "free", None: "?"}[o.locked]
        owner = o.record.owner if o.record is not None else "-"
        strays = f" (+{len(o.stray_cgroups)} stray cgroup(s))" if o.stray_cgroups else ""
        rows.append(f"{o.name:20} {o.state or '-':10} {o.pid or '-':>8} {_identity(o):11} {lock:6} "
                    f"{o.probe:9} {o.child:10} {o.containment or '-':13} {owner or '-'}{strays}")
    _emit(args, [o.to_dict() for o in seen], rows if seen else [f"no sessions in {directory}"])
    return EXIT_OK


def _identity(o: Observed) -> str:
    return "prev-boot" if o.boot == "previous" else o.identity


def _registry_json(path: str) -> Any:
    """The registry's JSON (stdin for -), size-capped, for the hosts' reconcile (tower_client.hosts)."""
    if path == "-":
        data = sys.stdin.buffer.read(MAX_REGISTRY_BYTES + 1)
        if len(data) > MAX_REGISTRY_BYTES:
            raise RegistryError("-", f"larger than {MAX_REGISTRY_BYTES} bytes")
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise RegistryError("-", f"not valid JSON: {exc}") from None
    load_registry(path)  # every check of the file's
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _reconcile(args: argparse.Namespace, directory: Path) -> int:
    raw = _registry_json(args.registry)
    if names_host(raw):
        return _reconcile_hosts(args, raw)
    registry = parse_registry(raw, args.registry if args.registry != "-" else None)
    decisions = reconcile(registry, discover(directory, cgroup_parent=args.cgroup_parent), now=time.time(),
                          husk_max_age=args.husk_max_age, owner=args.owner)
    lines = [f"{d.action:9} {d.name:20} {d.reason:22} [{(d.observed.containment if d.observed else None) or '-'}] "
             f"{d.detail}" for d in decisions] or ["nothing to do"]
    if not args.apply:
        leaked = remove_leaked_cgroups(args.owner, args.cgroup_parent, apply_=False)
        _emit(args, {"applied": False, "decisions": [d.to_dict() for d in decisions],
                     "leaked_cgroups": [c.to_dict() for c in leaked]},
              [*(lines if decisions or not leaked else []), *_leaked_lines(leaked), DRY_RUN_NOTE])
        return EXIT_OK
    report = apply(decisions, grace=args.grace, owner=args.owner)
    leaked = remove_leaked_cgroups(args.owner, args.cgroup_parent)
    lines = [f"{o.decision.action:9} {o.decision.name:20} {o.result:12} {o.error or o.detail}"
             for o in report.outcomes] or ([] if leaked else ["nothing to do"])
    _emit(args, {"applied": True, **report.to_dict(), "leaked_cgroups": [c.to_dict() for c in leaked]},
          [*lines, *_leaked_lines(leaked)])
    return EXIT_OK if report.ok else EXIT_FAILED


def _leaked_lines(leaked: list[LeakedCgroup]) -> list[str]:
    return [f"{'removed' if c.removed else 'leaked':9} {c.path}: {c.detail}" for c in leaked]


def _reconcile_hosts(args: argparse.Namespace, raw: Any) -> int:
    """Rows that name hosts: each host reconciles its own, in parallel (tower_client.hosts)."""
    outcomes = reconcile_hosts(raw, apply_=args.apply, timeout=args.host_timeout, owner=args.owner,
                               directory=args.dir, grace=args.grace, husk_max_age=args.husk_max_age)
    lines = []
    for o in outcomes:
        where = o.host or "(here)"
        if o.error:
            lines.append(f"# {where}: unreachable: {o.error}")
        for d in o.outcomes if o.applied else o.decisions:
            lines.append(f"{d.get('action', ''):9} {where}:{d.get('name', '')} {d.get('reason', ''):22} "
                         f"{d.get('result', '') or ''} {d.get('error') or d.get('detail') or ''}".rstrip())
    if not args.apply:
        lines.append(DRY_RUN_NOTE)
    _emit(args, {"applied": args.apply, "hosts": [o.to_dict() for o in outcomes]}, lines or ["nothing to do"])
    return EXIT_OK if all(o.ok for o in outcomes) or not args.apply else EXIT_FAILED


_LOCAL_ONLY = ("--host", "--host-timeout")
"""Options of this tower-client's own, not passed on to the remote one (each takes a value)."""


def remote_line(argv: list[str]) -> list[str]:
    """``argv`` for the remote tower-client: without --host and --host-timeout, and reading the registry
    from stdin (``--registry -``), where this one sends the file's content."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        option, equals, _ = token.partition("=")
        if option in _LOCAL_ONLY:
            i += 0 if equals else 1
            continue
        if option == "--registry":
            out.append("--registry=-" if equals else "--registry")
            if not equals:
                out.append("-")
                i += 1
            continue
        out.append(token)
    return out


def _remote(args: argparse.Namespace, argv: list[str]) -> int:
    """``tower-client --host H ...``: the same command by H's tower-client (a registry file goes over stdin)."""
    from shellper.host.ssh import check_version, remote_tower, run_remote

    data = json.dumps(_registry_json(args.registry)).encode() if args.command == "reconcile" else None
    check_version(args.host, args.host_timeout)
    done = run_remote(args.host, remote_tower(remote_line(argv)), input=data, timeout=args.host_timeout)
    sys.stdout.write(done.stdout.decode(errors="replace"))
    sys.stderr.write(done.stderr.decode(errors="replace"))
    return done.returncode


def _holders(args: argparse.Namespace, directory: Path) -> int:
    holders = find_holders(args.session_id, directory, reclaimable=args.reclaimable)
    foreign = [h for h in holders if h.kind == "foreign"]
    verdict = "mint" if foreign else ("reclaim" if holders else "resume")
    lines = [f"{h.pid:>8} {h.kind:7} {h.via:6} {h.reason}" for h in holders] or ["no holders"]
    lines.append(f"mint-or-reclaim would: {verdict}")
    _emit(args, {"session_id": args.session_id, "would": verdict, "holders": [h.to_dict() for h in holders]},
          lines)
    return EXIT_OK


def _reap(args: argparse.Namespace, directory: Path) -> int:
    o = observe(directory, args.name)
    if _dead(o) and o.record is not None and o.record.owner == (args.owner or default_owner()):
        return _reap_dead(args, directory, o.record)
    refusal = _refuse_reap(o, args.owner or default_owner())
    if refusal:
        _emit(args, {"name": args.name, "reaped": False, "reason": refusal}, [f"refused: {refusal}"])
        return EXIT_FAILED
    assert o.record is not None
    try:
        term = terminate_session(o.record, SessionPaths.for_name(directory, args.name), grace=args.grace)
    except ProcessGone as exc:
        _emit(args, {"name": args.name, "reaped": False, "reason": str(exc)}, [f"already gone: {exc}"])
        return EXIT_OK
    data = {"name": args.name, "reaped": True, "pid": term.pid, "method": term.method,
            "tree": list(term.tree), "stragglers": list(term.stragglers), "removed": list(term.removed),
            "stop_error": term.stop_error, "strangers": list(term.strangers), "kept": term.kept or None}
    _emit(args, data, [f"reaped {args.name} (pid {term.pid}, {len(term.tree)} descendant(s)) "
                       f"via {term.method}" + (f"; {term.kept}" if term.kept else "")])
    return EXIT_FAILED if term.kept else EXIT_OK


def _dead(o: Observed) -> bool:
    """The recorded shellper of this boot is gone (or its pid is another process's) and nobody holds the lock."""
    return o.boot == "current" and o.identity in ("gone", "mismatch") and o.locked is False


def _reap_dead(args: argparse.Namespace, directory: Path, record: SessionRecord) -> int:
    """A killed shellper's session: end what it left running (its cgroup, or what carries its mark) and
    remove its files, as reconcile --apply does for a dead session."""
    report = reap_survivors(record, directory=directory, grace=args.grace)
    try:
        removed = clean_session(SessionPaths.for_name(directory, args.name))
    except AlreadyRunning:
        removed = ()
    data = {"name": args.name, "reaped": True, "dead": True, "pid": record.shellper_pid,
            "survivors": list(report.pids), "suspect": report.suspect or None, "removed": list(removed),
            "strangers": list(report.strangers), "kept": report.kept or None}
    note = f"; nothing ended: {report.suspect}" if report.suspect else ""
    note += f"; {report.kept}" if report.kept else ""
    _emit(args, data, [f"reaped {args.name}: its shellper {record.shellper_pid} was already dead; ended "
                       f"{len(report.pids)} process(es) it left, removed {len(removed)} file(s){note}"])
    return EXIT_FAILED if report.suspect or report.kept else EXIT_OK


def _refuse_reap(o: Observed, owner: str) -> str:
    """Why ``reap`` will not touch this session ("" if it may)."""
    if o.record is None:
        return o.record_error or "no session record"
    if o.record.owner != owner:
        return f"the session belongs to owner {o.record.owner!r}, not {owner!r} (see --owner)"
    if o.boot != "current":
        return "the record is from another boot: nothing of it can be alive"
    if o.identity != "verified":
        return f"identity not verified ({o.identity}): {o.identity_detail}"
    if not o.locked or not o.lock_owner_ok:
        return "the recorded process does not hold the session lock"
    if o.probe == "answered" and (o.welcome_instance_id != o.record.instance_id or o.peer_pid != o.pid):
        return "the socket answers as another shellper than the record names"
    return name_mismatch(o) or ""


def _watch(args: argparse.Namespace, directory: Path) -> int:
    import asyncio

    from tower_client.watch import WATCH_VERSION, serve_watch  # inotify: only for this command

    version = WATCH_VERSION if args.watch_version is None else args.watch_version
    return asyncio.run(serve_watch(str(directory), args.owner or default_owner(), version))


def _launch(args: argparse.Namespace, directory: Path) -> int:
    """A session from the SessionConfig JSON on stdin, in this host's runtime directory; a ``cwd`` or ``env``
    of null is this login's (the Tower's own are another machine's)."""
    from shellper.client.launch import launch
    from shellper.core import structs
    from shellper.core.config import SessionConfig

    data = json.loads(sys.stdin.buffer.read(MAX_REGISTRY_BYTES))
    if not isinstance(data, dict):
        raise ValueError("launch: expected a SessionConfig's JSON object on stdin")
    data = {**data, "dir": str(directory), "cwd": data.get("cwd") or os.getcwd(),
            "env": dict(os.environ) if data.get("env") is None else data["env"]}
    info = launch(SessionConfig.from_json(json.dumps(data)))
    record = SessionRecord.from_json(Path(info.record).read_bytes(), info.record)
    print(json.dumps({"info": structs.asdict(info), "record": record.to_dict()}))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    try:
        if args.host is not None:
            return _remote(args, argv)
        directory = Path(runtime_dir(args.dir))
        if args.owner is not None:
            validate_owner(args.owner)
        handler = {"ls": _ls, "reconcile": _reconcile, "holders": _holders, "reap": _reap, "watch": _watch,
                   "launch": _launch}[args.command]
        return handler(args, directory)
    except (RegistryError, BadSessionId, BadOwner, PathError, ValueError) as exc:
        print(f"tower-client: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (ClientError, IdentityError, OwnerBusy, OSError, SshError, ShellperError) as exc:
        print(f"tower-client: {exc}", file=sys.stderr)  # every error raised on purpose is one line
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
