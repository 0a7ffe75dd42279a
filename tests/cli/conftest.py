"""The CLI tests run against the same embedded demo cluster as tests/demo."""

from tests.support.demo_process import demo as demo
