"""gpugraph's GraphQL server: the HTTP app, Kubernetes cache and agent wiring.

Import the modules directly (``api.app.create_app``, ``api.settings.Settings``):
this package loads none of them, so ``gpugraph agent`` and ``gpugraph top``,
which enter through it, do not import the GraphQL stack.
"""
