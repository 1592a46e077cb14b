"""``shellper set NAME KEY=VALUE...``: label a session (``KEY=`` removes a label); ``ls --where`` finds it by them."""

from __future__ import annotations

from shellper.cli.options import NAME, Positional

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

ARGUMENTS = (
    NAME,
    Positional("labels", nargs="*", metavar="KEY=VALUE",
               help="labels to set (KEY= removes one); none: print the session's labels. Keys: letters, digits, "
                    "_ . - /; a label is shown by ls -l and is no secret"),
)


def handle(args: argparse.Namespace) -> int:
    from shellper.cli.connect import CliError, connect
    from shellper.client.blocking import RemoteError
    from shellper.core.labels import BadLabel, parse_assignment
    from shellper.core.terminal.text import printable
    from shellper.protocol import wire

    try:
        changes = dict(parse_assignment(text) for text in args.labels)
    except BadLabel as exc:
        raise CliError(f"set: {exc}") from None
    # a terminal, not the tower: a connection as tower would take that place from a Tower that holds it
    with connect(args, wire.Role.TERMINAL, replay_bytes=0) as client:
        if not changes:
            status = client.request(wire.Status(), wire.StatusReply)
            assert isinstance(status, wire.StatusReply)
            labels = status.info.get("labels") or {}
        else:
            assert client.welcome is not None
            if not wire.supports(client.welcome.version, wire.Feature.REPLY):
                raise CliError(f"set: session {args.name!r}: its shellper speaks protocol version "
                               f"{client.welcome.version}, which has no labels")
            try:  # a shellper from before labels skips the frame: the request's deadline answers then
                reply = client.request(wire.Labels(set=changes), wire.Reply)
            except RemoteError as exc:
                raise CliError(f"set: session {args.name!r}: {exc.error.message}") from None
            assert isinstance(reply, wire.Reply)
            labels = reply.result.get("labels") or {}
    if not changes:
        for key, value in sorted(labels.items()):
            print(printable(f"{key}={value}"))
    return 0
