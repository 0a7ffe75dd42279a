"""GPU series in the Prometheus text format: declared once, rendered by the server and the agent.

``families`` declares every series (name, help, labels) that the server's
cluster-wide ``/metrics`` and each agent's own ``/metrics`` export;
``containers`` holds what a container's processes hold on one GPU;
``node_series`` attributes this node's processes by the pod names the server
sent; ``http`` is the agent's small ``/metrics`` server. Import the modules
themselves.
"""
