"""gpugraph's node agent: NVML GPUs and host processes mapped to containers and pods."""
