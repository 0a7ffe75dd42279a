"""Kubernetes label selector parsing and matching."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graph_schema.selectors import LabelSelectorError, parse_label_selector

LABELS = {"app": "train", "team": "vision", "example.com/tier": "gpu", "empty": ""}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("app=train", True),
        ("app==train", True),
        ("app = train", True),
        ("app=infer", False),
        ("app!=infer", True),
        ("missing!=x", True),
        ("app in (infer, train)", True),
        ("app in (infer)", False),
        ("app notin (infer,eval)", True),
        ("missing notin (x)", True),
        ("missing in (x)", False),
        ("team", True),
        ("missing", False),
        ("!missing", True),
        ("! team", False),
        ("example.com/tier=gpu,app in (train),team,!missing", True),
        ("example.com/tier=gpu,app=infer", False),
        ("empty=", True),
        ("empty in (,x)", True),
        ("", True),
        ("  ", True),
    ],
)
def test_matching(selector: str, matches: bool) -> None:
    assert parse_label_selector(selector).matches(LABELS) is matches


@pytest.mark.parametrize(
    ("selector", "reason"),
    [
        ("app in (a,b", "unclosed '('"),
        ("app in a,b)", "unbalanced ')'"),
        ("app in ((a))", "nested parentheses"),
        ("app=train,", "empty requirement"),
        (",app", "empty requirement"),
        ("app in ()", "empty value set for 'app'"),
        ("app=a b", "cannot parse requirement 'app=a b'"),
        ("-bad-=x", "invalid label key '-bad-'"),
        ("app=bad value!", "cannot parse requirement 'app=bad value!'"),
        ("app=-x", "invalid label value '-x'"),
        ("app>1", "cannot parse requirement 'app>1'"),
        ("!", "invalid label key ''"),
    ],
)
def test_malformed_selectors_name_the_problem(selector: str, reason: str) -> None:
    with pytest.raises(LabelSelectorError) as caught:
        parse_label_selector(selector)
    assert str(caught.value) == f"invalid labelSelector {selector!r}: {reason}"


def test_a_malformed_selector_is_bad_input_and_quoted_cut_short() -> None:
    # Echoed whole, a 100 kB selector would make its error as large as the request.
    selector = "app=" + "x" * 100_000 + " y"
    with pytest.raises(LabelSelectorError) as caught:
        parse_label_selector(selector)
    assert caught.value.extensions == {"code": "BAD_USER_INPUT"}
    cut = repr(selector[:100]) + " (cut from 100006 characters)"
    assert str(caught.value) == f"invalid labelSelector {cut}: cannot parse requirement {cut}"


names = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
label_sets = st.dictionaries(names, names, max_size=4)


@given(wanted=label_sets, labels=label_sets)
def test_equality_selector_matches_exactly_supersets(
    wanted: dict[str, str], labels: dict[str, str]
) -> None:
    selector = ",".join(f"{k}={v}" for k, v in wanted.items())
    expected = all(labels.get(k) == v for k, v in wanted.items())
    assert parse_label_selector(selector).matches(labels) is expected


@given(keys=st.lists(names, min_size=1, max_size=3), labels=label_sets)
def test_set_selectors_agree_with_their_definition(keys: list[str], labels: dict[str, str]) -> None:
    values = sorted(set(keys))
    key = keys[0]
    inside = parse_label_selector(f"{key} in ({', '.join(values)})").matches(labels)
    outside = parse_label_selector(f"{key} notin ({','.join(values)})").matches(labels)
    assert inside is (labels.get(key) in values)
    assert outside is (labels.get(key) not in values)
