"""dcgm-exporter-compatible ``/metrics`` for the agent, with pods attributed through PodResources."""
