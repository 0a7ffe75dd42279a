"""The compiled execution path: a validated document run as a plan of plain functions.

``plan`` compiles an operation against the strawberry schema (which stays the
one definition: the plan calls the very same resolvers); ``run`` executes a
plan; ``documents`` caches plans by document hash and decides, per request,
whether the plan answers or strawberry does.
"""
