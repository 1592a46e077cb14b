"""``shellper status NAME``: a session's state, exits and clients; from its record when its shellper is gone."""

from __future__ import annotations

from shellper.cli.options import NAME, Flag

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

    from shellper.host.paths import SessionPaths

ARGUMENTS = (NAME, Flag("--json", help="the full status as JSON, for programs"))


def handle(args: argparse.Namespace) -> int:
    import json
    import os
    import time

    from shellper.cli.connect import CliError, connect, session_dir, trusted_paths
    from shellper.cli.show import duration
    from shellper.core.exitrecord import ExitRecordError, exit_line
    from shellper.core.terminal.text import printable
    from shellper.host.record import SessionLock
    from shellper.protocol import wire

    paths = trusted_paths(session_dir(args), args.name)
    try:
        client = connect(args, wire.Role.VIEWER, replay_bytes=0)
    except CliError as exc:  # no answer: if the shellper is gone and left its record, show what that says
        from shellper.client.stop import silent_shellper  # the stop logic only when no shellper answers

        silent = silent_shellper(paths, exc.cause) if exc.cause is not None else None
        if silent is not None:
            pid = silent[0].shellper_pid
            raise CliError(f"status: session {args.name!r}: {silent[1]} `kill -CONT {pid}` resumes a stopped one; "
                           f"`shellper stop {args.name}` ends it") from None
        if SessionLock.is_locked(paths.lock) or not os.path.lexists(paths.record):
            raise
        return _status_of_dead(args, paths)
    with client:
        reply = client.request(wire.Status(), wire.StatusReply)
    assert isinstance(reply, wire.StatusReply)
    if args.json:
        print(json.dumps({"state": reply.state, **reply.info}, indent=2, default=str))
        return 0
    info = reply.info
    unreadable: ExitRecordError | None = None
    try:
        last = reply.last_exit()
    except ExitRecordError as exc:  # a shellper of another version: show the rest
        last, unreadable = None, exc
    now, next_restart_at = time.time(), info.get("next_restart_at")
    reason = info.get("state_reason") or ""
    if last is not None and reason == last.reason:  # "...; restart #2 (crash) in 0.87 s": counted down from now
        reason = exit_line(last, reply.state, next_restart_at, now)
    # Every line goes through printable(): the reason quotes what a program wrote, the command and directory
    # are whatever the session was started with (as ls shows them).
    print(printable(f"{info.get('name')}: {reply.state}" + (f" ({reason})" if reason else "")))
    print(printable(f"  shellper pid {info.get('shellper_pid')}, child pid {info.get('child_pid') or '-'}, "
                    f"up {duration(info.get('uptime'))}"))
    _print_containment(info.get("owner"), info.get("containment"), info.get("cgroup"))
    print("  command " + printable(f"{' '.join(info.get('argv') or [])} in {info.get('cwd')}"))
    if info.get("working_dir"):
        told = {"osc7": "its shell says, by OSC 7", "proc": "the kernel says"}.get(info.get("working_dir_from") or "")
        print(printable(f"  now in {info['working_dir']}" + (f" ({told})" if told else "")))
    _print_labels(info.get("labels"))
    print(printable(f"  output {info.get('ring_end')} bytes, ring holds "
                    f"{info.get('ring_end', 0) - info.get('ring_start', 0)}"))
    print(printable(f"  exits {info.get('exit_count')}, restarts {info.get('restarts')}"))
    if unreadable is not None:
        print(printable(f"  last exit: unreadable ({unreadable})"))
    elif last is not None:
        print(printable(f"  last exit: {exit_line(last, reply.state, next_restart_at, now)}"))
    print(f"  clients: {max(0, len(info.get('clients') or []) - 1)}")  # not counting this status query
    if info.get("output_held"):
        print("  output held: the tower or a terminal is more than half a ring behind (the child waits for it)")
    return 0


def _print_containment(owner: str | None, containment: str | None, cgroup: str | None) -> None:
    from shellper.core.terminal.text import printable

    print(printable(f"  owner {owner or '-'}, containment {containment or '-'}"))
    if cgroup:
        print(printable(f"  cgroup {cgroup}"))


def _print_labels(labels: object) -> None:
    from shellper.core.terminal.text import printable

    if isinstance(labels, dict) and labels:
        print(printable("  labels " + " ".join(f"{key}={value}" for key, value in sorted(labels.items()))))


def _status_of_dead(args: argparse.Namespace, paths: SessionPaths) -> int:
    """No live shellper holds the lock, but the record is there: what it last said (owner, containment, its
    cgroup, the exits), marked stale; exit 1, as for any session that is not running."""
    import json
    import sys
    import time

    from shellper.cli.connect import CliError
    from shellper.core.exitrecord import exit_line
    from shellper.core.terminal.text import printable
    from shellper.host.record import RecordError, read_record

    try:
        record = read_record(paths.record)
    except FileNotFoundError:  # removed since the check
        raise CliError(f"session {args.name!r}: no such session") from None
    except (OSError, RecordError) as exc:
        raise CliError(f"status: session {args.name!r}: its shellper is gone and its record is unreadable: "
                       f"{exc}") from None
    reason = f"no live shellper holds this session's lock; its record said {record.state}"
    if args.json:
        print(json.dumps({"state": "stale", "state_reason": reason, "name": record.name, "owner": record.owner,
                          "containment": record.containment, "cgroup": record.cgroup, "record": record.to_dict()},
                         indent=2, default=str))
    else:
        print(printable(f"{record.name}: stale ({reason})"))
        print(f"  shellper pid {record.shellper_pid} (gone), child pid {record.child_pid or '-'} (recorded)")
        _print_containment(record.owner, record.containment, record.cgroup)
        print("  command " + printable(f"{' '.join(record.command)} in {record.cwd}"))
        _print_labels(record.labels)
        print(f"  exits {record.exit_count}, restarts {record.restarts}")
        if record.exits:  # nobody is left to restart it: no countdown
            print(printable(f"  last exit: {exit_line(record.exits[-1], 'stale', None, time.time())}"))
    print(f"shellper: session {args.name!r} is not running (shown from its record)", file=sys.stderr)
    return 1
