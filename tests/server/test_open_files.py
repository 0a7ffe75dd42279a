"""The open-file limit raised at start, against a fake of the resource module."""

from __future__ import annotations

import logging

import pytest

from api.lifecycle.open_files import NR_OPEN_DEFAULT, raise_open_files_limit

INFINITY = -1


class FakeLimits:
    """``resource``'s shape, with a kernel that refuses a soft limit over ``ceiling``."""

    RLIMIT_NOFILE = 7
    RLIM_INFINITY = INFINITY

    def __init__(self, soft: int, hard: int, ceiling: int | None = None) -> None:
        self.limits = (soft, hard)
        self.ceiling = ceiling
        self.calls: list[tuple[int, tuple[int, int]]] = []

    def getrlimit(self, resource: int, /) -> tuple[int, int]:
        assert resource == self.RLIMIT_NOFILE
        return self.limits

    def setrlimit(self, resource: int, limits: tuple[int, int], /) -> None:
        self.calls.append((resource, limits))
        if self.ceiling is not None and limits[0] > self.ceiling:
            raise ValueError("not allowed to raise maximum limit")
        self.limits = limits


def test_the_soft_limit_is_raised_to_the_hard_one_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeLimits(1024, 524_288)
    with caplog.at_level(logging.INFO, logger="api.lifecycle.open_files"):
        result = raise_open_files_limit(fake)
    assert fake.calls == [(FakeLimits.RLIMIT_NOFILE, (524_288, 524_288))]
    assert (result.before, result.soft, result.hard) == (1024, 524_288, 524_288)
    assert "raised from 1024 to 524288" in caplog.text


def test_a_soft_limit_already_at_the_hard_one_is_left_alone() -> None:
    fake = FakeLimits(20_000, 20_000)
    result = raise_open_files_limit(fake)
    assert fake.calls == []
    assert result.soft == 20_000


def test_an_unlimited_hard_limit_raises_the_soft_one_to_what_linux_allows() -> None:
    fake = FakeLimits(1024, INFINITY)
    assert raise_open_files_limit(fake).soft == NR_OPEN_DEFAULT
    # The hard limit is never touched.
    assert fake.limits == (NR_OPEN_DEFAULT, INFINITY)


def test_a_refusal_keeps_the_old_limit_and_warns(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeLimits(1024, INFINITY, ceiling=65_536)
    with caplog.at_level(logging.WARNING, logger="api.lifecycle.open_files"):
        result = raise_open_files_limit(fake)
    assert (result.before, result.soft) == (1024, 1024)
    assert fake.limits == (1024, INFINITY)
    assert "could not raise the soft limit from 1024" in caplog.text


def test_an_unlimited_soft_limit_is_left_alone() -> None:
    fake = FakeLimits(INFINITY, INFINITY)
    assert raise_open_files_limit(fake).soft == INFINITY
    assert fake.calls == []
