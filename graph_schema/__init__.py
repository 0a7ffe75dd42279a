"""gpugraph's GraphQL schema: types, resolvers and dataloaders."""
