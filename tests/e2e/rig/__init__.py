"""A real single-node Kubernetes (etcd, apiserver, controller-manager, scheduler, containerd, kubelet).

Exists so kubegpu's end-to-end tests run against real components without Docker; see docs/testing.md.
"""
