"""gpugraph's node agent: NVML GPUs and host processes mapped to containers and pods.

Import the modules directly: the server reads only ``models`` (the records
an agent sends), and importing this package loads nothing else, not the gRPC
service, NVML or containerd.
"""
