"""Kubelet PodResources API v1: which container holds which device (``client.py``), over gRPC."""
