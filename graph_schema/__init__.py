"""gpugraph's GraphQL schema: types, resolvers and dataloaders.

Import the modules directly (``graph_schema.schema.build_schema``,
``graph_schema.records.PodRecord``): this package loads none of them, so a
caller that needs only the records does not pay for the schema.
"""
