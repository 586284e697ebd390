"""Generated kubelet DRA plugin (v1, v1beta1) and plugin registration (v1) stubs (``make proto``); never edit by hand."""
