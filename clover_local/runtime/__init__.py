"""The runtime: kernels, expert cache and offloaded MoE for a 16 GB GPU."""
