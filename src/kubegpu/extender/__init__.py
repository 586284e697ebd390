"""The kube-scheduler extender: per-GPU accounting from the API server and the simulator's policies.

``kubegpu extender`` serves kube-scheduler's HTTP extender API (``handlers``, ``server``) for pods that
ask for ``nvidia.com/gpu`` or a GPU share (``kubegpu.io/gpu-milli``). The ``ledger`` keeps, per GPU,
the milli still free, built from Node and Pod objects (``node``, ``ask``) and the assignment
annotation written on every pod it binds (``assignment``); ``cluster`` lists and watches the API
server through ``kubegpu.kubeapi``. Decisions are ``kubegpu.sim.policy`` objects, unchanged.
"""
