"""GPU health events on the agent: NVML's event API, NVIDIA's kernel messages, and each
event recorded in the occupancy log with the processes and pods that were on the GPU."""
