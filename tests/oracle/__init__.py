"""NVIDIA's device plugin and GFD as an oracle for kubegpu (issue 56): the build script and the harness.

``build.sh`` builds NVIDIA's binaries from the Go module proxy into the rig cache; ``harness.py`` runs
them (and kubegpu) against the C NVML stand-in in a private mount namespace and holds the list of
deliberate differences. The tests are in ``tests/integration/oracle/``.
"""
