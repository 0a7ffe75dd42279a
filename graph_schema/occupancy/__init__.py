"""The agents' occupancy logs in the graph: one home for what the logs answer.

``types`` holds the GraphQL objects of what a log records, ``resolvers`` the
fields that read the logs (the roots, and the history fields of Node, Gpu and
Pod, declared here and named there), ``fan_out`` the reading of many nodes'
logs at once (bounded, failures reported per node, answers merged), and
``cursor`` the position a connection resumes from. What the agents log next
beside occupancy (allocation records, GPU health events) takes the same shape:
its objects, its fields and its readers here, the wire in
``node_resolver/history_codec.py``.
"""
