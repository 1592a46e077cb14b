"""shellper.core.labels: what a label may be, and how changes and --where apply."""

from __future__ import annotations

import pytest

from shellper.core.labels import MAX_LABELS, BadLabel, apply_changes, matches, parse_assignment, validate_labels

ASSIGNMENTS = [("team=infra", ("team", "infra")), ("task=", ("task", "")), ("a/b.c-d_e=x=y", ("a/b.c-d_e", "x=y")),
               ("k=two words", ("k", "two words"))]


@pytest.mark.parametrize(("text", "pair"), ASSIGNMENTS)
def test_assignments_are_read(text: str, pair: tuple[str, str]) -> None:
    assert parse_assignment(text) == pair


@pytest.mark.parametrize("text", ["team", "=v", "two words=v", "-k=v", "k\x1b=v", "k=\x1b[2J", "k" * 65 + "=v",
                                  "k=" + "v" * 257, "ключ=v"])
def test_bad_assignments_are_refused(text: str) -> None:
    with pytest.raises(BadLabel):
        parse_assignment(text)


def test_changes_set_and_remove_all_or_nothing() -> None:
    labels = {"a": "1", "b": "2"}
    assert apply_changes(labels, {"a": "", "c": "3"}) == {"b": "2", "c": "3"}
    assert apply_changes(labels, {"gone": ""}) == labels
    with pytest.raises(BadLabel):
        apply_changes(labels, {"ok": "1", "bad key": "2"})
    assert labels == {"a": "1", "b": "2"}


def test_the_count_is_bounded() -> None:
    full = {f"k{i}": "v" for i in range(MAX_LABELS)}
    assert validate_labels(full) == full
    assert apply_changes(full, {"k0": "", "new": "v"})["new"] == "v"  # a removal makes room in the same change
    with pytest.raises(BadLabel, match="at most 32"):
        apply_changes(full, {"one-more": "v"})


def test_where_matches_every_pair_and_an_empty_value_means_absent() -> None:
    labels = {"team": "infra", "task": "build"}
    assert matches(labels, {"team": "infra"})
    assert matches(labels, {"team": "infra", "task": "build"})
    assert not matches(labels, {"team": "infra", "task": "test"})
    assert matches(labels, {"owner": ""}) and not matches(labels, {"team": ""})
