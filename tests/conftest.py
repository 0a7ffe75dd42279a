"""Pytest configuration shared by every test module."""
