"""``shellper run``'s started line quotes ``--dir`` as shlex.quote does, without importing shlex when the
directory needs no quotes (shellper.cli.commands.run._quoted: the warm quick path loads no shlex)."""

from __future__ import annotations

import shlex

import pytest

from shellper.cli.commands.run import _quoted


@pytest.mark.parametrize("word", ["/tmp/d", "/run/user/0/shellper", "", "a b", "it's", "$HOME", "x;y", "ümlaut",
                                  "-dash", "@%+=:,./-_", "tab\there", "new\nline", "*", "~/d"])
def test_quoted_is_shlex_quote(word: str) -> None:
    assert _quoted(word) == shlex.quote(word)
