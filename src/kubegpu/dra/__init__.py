"""kubegpu's DRA driver: a kubelet plugin (registration, prepare/unprepare, CDI) and its ResourceSlices."""
