"""gpugraph's GraphQL server: the HTTP app, Kubernetes cache and agent wiring."""
