"""Generated kubelet Device Plugin API v1beta1 stubs; regenerate with ``make proto``, never edit by hand."""
