"""Accept-style headers: q-values read as numbers, per RFC 9110 §12.4."""

from __future__ import annotations

import pytest

from api.http.accept import quality, weighted

GQL = "application/graphql-response+json"


def test_elements_are_lower_cased_without_parameters_and_weighted() -> None:
    header = 'Application/JSON;charset=utf-8, text/plain;format="a,b;q=0";q=0.5, */*;q=0.1'
    assert list(weighted(header)) == [
        ("application/json", 1.0),
        ("text/plain", 0.5),
        ("*/*", 0.1),
    ]


@pytest.mark.parametrize(
    ("weight", "expected"),
    [
        ("q=1", 1.0),
        ("q=1.000", 1.0),
        ("Q=0.5", 0.5),
        ("q = 0.25", 0.25),
        ("q=0.001", 0.001),
        ("q=0", 0.0),
        ("q=0.", 0.0),
        ("q=0.0", 0.0),
        ("q=0.000", 0.0),
    ],
)
def test_a_weight_is_a_number(weight: str, expected: float) -> None:
    assert quality(f"{GQL};{weight}", (GQL,)) == expected


@pytest.mark.parametrize("weight", ["q=oops", "q=0.0001", "q=1.5", "q=2", "q=-1", "q=", "q=.5"])
def test_an_element_with_a_malformed_weight_is_dropped(weight: str) -> None:
    assert list(weighted(f"{GQL};{weight}, application/json")) == [("application/json", 1.0)]
    assert quality(f"{GQL};{weight}", (GQL,)) == 0.0


def test_the_first_q_is_the_weight_and_later_ones_are_extensions() -> None:
    assert quality(f"{GQL};q=0.3;q=0", (GQL,)) == 0.3


def test_a_named_element_wins_over_the_wildcard() -> None:
    assert quality("gzip;q=0, *", ("gzip",), wildcard="*") == 0.0
    assert quality("br, *;q=0.2", ("gzip",), wildcard="*") == 0.2
    assert quality("br, *;q=0.2", ("gzip",)) == 0.0
    assert quality("x-gzip;q=0.4, br", ("gzip", "x-gzip"), wildcard="*") == 0.4


def test_nothing_named_is_not_acceptable() -> None:
    assert quality("", ("gzip",), wildcard="*") == 0.0
    assert quality(" , ;q=1", ("gzip",)) == 0.0
