"""Reaching node agents: where each one is (``discovery``) and the channel pool (``pool``)."""
