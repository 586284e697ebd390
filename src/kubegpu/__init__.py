"""kubegpu: NVIDIA GPUs from a host into Kubernetes pods, correctly and efficiently.

The package is layered (see ``docs/architecture.md``): a pure core (``model``, ``allocate``,
``accounts``) with no I/O, adapters at the edges (``sources``, ``deviceplugin``, ``doctor``, ``sim``),
and a thin command line (``cli``).
"""

__version__ = "0.1.0"
