"""The Kubernetes side of the server: a watched, indexed cache of pods and nodes.

``cache.ClusterCache`` holds slim records and answers the graph's lookups;
``watcher.ClusterWatcher`` fills it with paginated lists and keeps it current
with watches; ``config.load_kube_config`` finds the API server (``gpugraph
top`` reads only that module). The fake API server used by tests, the demo
and the benchmarks lives in ``api.demo.cluster.apiserver``.
"""
