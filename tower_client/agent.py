"""An agent's command line from the mint-or-reclaim verdict, so "Session ID already in use" cannot loop.

An agent CLI resumes a conversation with ``--resume ID`` and starts one with ``--session-id ID``.
Resuming an id that a live process holds makes the CLI die at once, and a supervisor that restarts it
with the same command line crash-loops. So the command is never written by hand: :func:`command_for`
builds it from :func:`tower_client.holders.mint_or_reclaim`'s verdict - ``resume``/``reclaim``: the id
is free (or was freed from this session's own leftovers), resume it; ``mint``: somebody else holds it
(a person's own CLI, another session), start a fresh id and never touch the holder.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shellper.core.defaults import DEFAULT_GRACE
from shellper.core.errors import ShellperError
from tower_client.holders import Verdict, mint_or_reclaim_async

__all__ = ["AgentCommand", "AgentCommandError", "Resolved", "command_for", "new_conversation_id", "resolve"]


class AgentCommandError(ShellperError, ValueError):
    """An agent command that cannot be used (from the Tower's code or its registry's ``agent`` column)."""


def new_conversation_id() -> str:
    return str(uuid.uuid4())


@dataclass(frozen=True)
class AgentCommand:
    """The agent's program and fixed arguments, and the conversation it should continue (None: a new one)."""

    argv: tuple[str, ...]
    conversation_id: str | None = None
    resume_flag: str = "--resume"
    mint_flag: str = "--session-id"

    def __post_init__(self) -> None:
        if isinstance(self.argv, str | bytes):  # iterated, "claude" would be the command c l a u d e
            raise AgentCommandError(f"argv is a list of arguments, not one string: write ({self.argv!r:.60},)")
        if not self.argv or not all(isinstance(a, str) and a for a in self.argv):
            raise AgentCommandError(f"argv must be a non-empty list of non-empty strings, got {self.argv!r:.80}")
        object.__setattr__(self, "argv", tuple(self.argv))  # a list given is kept as the declared tuple
        if self.conversation_id is not None and (not isinstance(self.conversation_id, str) or not self.conversation_id):
            raise AgentCommandError(f"conversation_id must be a non-empty string or None, got {self.conversation_id!r}")
        for flag in (self.resume_flag, self.mint_flag):
            if not isinstance(flag, str) or not flag.startswith("-"):
                raise AgentCommandError(f"flags must start with '-', got {flag!r}")

    def to_column(self) -> dict[str, Any]:
        return {"argv": list(self.argv), "conversation_id": self.conversation_id, "resume_flag": self.resume_flag,
                "mint_flag": self.mint_flag}

    @classmethod
    def from_column(cls, column: Mapping[str, Any]) -> AgentCommand:
        if not isinstance(column, Mapping) or not isinstance(column.get("argv"), list):
            raise AgentCommandError(f"an agent column needs an argv list, got {column!r:.80}")
        return cls(tuple(column["argv"]), column.get("conversation_id"), column.get("resume_flag", "--resume"),
                   column.get("mint_flag", "--session-id"))


@dataclass(frozen=True)
class Resolved:
    """The command line to start, the conversation it carries, and why."""

    argv: list[str]
    conversation_id: str
    action: str
    """resume, reclaim or mint (the verdict's action; mint also when there was no id yet)."""
    reason: str
    verdict: Verdict | None = field(default=None, compare=False)


def command_for(agent: AgentCommand, verdict: Verdict | None,
                new_id: Callable[[], str] = new_conversation_id) -> Resolved:
    """Pure: ``verdict`` None means there is no id to continue yet (mint one)."""
    if verdict is None:
        cid = new_id()
        return Resolved([*agent.argv, agent.mint_flag, cid], cid, "mint", "no conversation to continue")
    if verdict.session_id != agent.conversation_id:
        raise AgentCommandError(f"the verdict is about {verdict.session_id!r}, not {agent.conversation_id!r}")
    if verdict.action in ("resume", "reclaim"):
        return Resolved([*agent.argv, agent.resume_flag, verdict.session_id], verdict.session_id, verdict.action,
                        verdict.reason, verdict)
    if verdict.action == "mint":
        cid = new_id()
        return Resolved([*agent.argv, agent.mint_flag, cid], cid, "mint", verdict.reason, verdict)
    raise AgentCommandError(f"unknown verdict action {verdict.action!r}")


async def resolve(agent: AgentCommand, runtime_dir: str, session: str, *, owner: str | None = None,
                  grace: float = DEFAULT_GRACE) -> Resolved:
    """Ask who holds the conversation (off the event loop: it scans /proc and may end this session's own
    leftovers, never anybody else's), then build the command line."""
    if agent.conversation_id is None:
        return command_for(agent, None)
    verdict = await mint_or_reclaim_async(agent.conversation_id, runtime_dir, grace=grace, reclaimable=(session,),
                                          owner=owner)
    return command_for(agent, verdict)
