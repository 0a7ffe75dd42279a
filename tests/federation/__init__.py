"""Apollo Federation test kit: a real Node.js gateway and a small second subgraph."""
