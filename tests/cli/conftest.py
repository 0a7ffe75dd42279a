"""The CLI tests run against the same embedded demo cluster as tests/demo."""

from tests.demo.test_runner import demo as demo
