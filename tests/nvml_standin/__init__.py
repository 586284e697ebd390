"""A C-level NVML stand-in (``libnvidia-ml.so.1``) that the real nvidia-ml-py loads, for integration tests.

``nvml_standin.c`` is the library; ``machine.py`` describes the machine it plays (YAML, or one of
kubegpu's node specs) and compiles that description for it; ``build.py`` compiles the library with the
machine's C compiler. ``python -m tests.nvml_standin --help`` does both from a shell (the device script
``bench/gpu_smoke.sh --standin`` uses it for its dry run).
"""
