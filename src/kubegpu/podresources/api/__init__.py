"""Generated kubelet PodResources API v1 stubs (``make proto``); never edit by hand."""
