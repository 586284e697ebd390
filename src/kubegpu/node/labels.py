"""The Node's GPU labels, with GPU Feature Discovery's keys and value formats, computed without I/O.

``node_labels`` is a pure function of the ``Node`` (its GPUs and topology), how the device plugin
advertises them (``LabelInputs``: MIG strategy and sharing, resolved from the agent's config), the
driver and CUDA versions when known, and an injected timestamp; ``kubegpu labels`` and the agent both
call it, so what the command prints is what the agent writes. A node's own driver and CUDA versions
(NVML's, or a node spec's) are used when none are given. Values come from NVML on a real GPU (its
name, compute capability, MIG capability, each MIG device's attributes: ``Gpu``) and from the
catalogue on a simulated one. Formats follow GFD v0.20.0
(its README's label list; ``docs/node.md``): the product name sanitised and joined with ``-``,
``-SHARED`` when the GPUs are replicated under their own name, memory in MiB, the family from the
compute capability, ``mig.strategy`` absent for ``none``, one ``mig-<profile>.*`` family per profile
under ``mixed``. kubegpu adds its NVLink topology under ``kubegpu.io/`` (no peer publishes it), and
``nvidia.com/gpu.present=true`` (not a GFD label; charts, ours included, schedule on it).

Every key this module can produce starts with ``nvidia.com/`` or ``kubegpu.io/``; stale ones are
removed by the writer (``kubegpu.node.writer``), which owns only the keys it applied itself.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from kubegpu.errors import InputError
from kubegpu.model.mig import profile as mig_profile
from kubegpu.model.node import Gpu, MigAttributes, Node

__all__ = [
    "GFD_PREFIX",
    "KUBEGPU_PREFIX",
    "DriverVersions",
    "LabelInputs",
    "MigMode",
    "SharingMode",
    "gpu_family",
    "node_labels",
    "sanitise",
]

GFD_PREFIX = "nvidia.com/"
KUBEGPU_PREFIX = "kubegpu.io/"


class MigMode(Enum):
    NONE = "none"
    SINGLE = "single"
    MIXED = "mixed"


class SharingMode(Enum):
    NONE = "none"
    TIME_SLICING = "time-slicing"
    MPS = "mps"


@dataclass(frozen=True, kw_only=True)
class DriverVersions:
    """The NVIDIA driver version (``550.54.15``) and the CUDA driver API version (``12.4``)."""

    driver: str
    cuda: str | None = None


@dataclass(frozen=True, kw_only=True)
class LabelInputs:
    """How the GPUs are advertised. ``replicas`` maps a shared resource name (``nvidia.com/gpu``,
    ``nvidia.com/mig-1g.10gb``) to its replica count; ``renamed`` holds the ones advertised under
    another name (``renameByDefault`` / ``rename``: no ``-SHARED`` suffix)."""

    mig: MigMode = MigMode.NONE
    sharing: SharingMode = SharingMode.NONE
    replicas: Mapping[str, int] = field(default_factory=dict)
    renamed: frozenset[str] = field(default_factory=frozenset)


_SANITISE_DROP = re.compile(r"[^A-Za-z0-9_. -]")


def sanitise(text: str) -> str:
    """GFD's sanitiser: drop characters outside ``[A-Za-z0-9-_. ]``, join the words with ``-``."""
    return "-".join(_SANITISE_DROP.sub("", text).split())


def gpu_family(major: int, minor: int) -> str:
    """GFD's family name of a CUDA compute capability."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ada-lovelace" if minor == 9 else "ampere"
    return {
        1: "tesla",
        2: "fermi",
        3: "kepler",
        5: "maxwell",
        6: "pascal",
        9: "hopper",
        10: "blackwell",
        12: "blackwell",
        13: "rubin",
    }.get(major, "undefined")


def _product(gpu: Gpu) -> str:
    """GFD's product: NVML's name sanitised (``NVIDIA L4`` -> ``NVIDIA-L4``)."""
    return sanitise(gpu.product_name)


def _versions(versions: DriverVersions | None) -> dict[str, str]:
    if versions is None or not versions.driver:
        return {}
    parts = [*versions.driver.split("."), "", "", ""]
    major, minor, rev = parts[0], parts[1], parts[2]
    out = {
        "cuda.driver-version.major": major,
        "cuda.driver-version.minor": minor,
        "cuda.driver-version.revision": rev,
        "cuda.driver-version.full": versions.driver,
        "cuda.driver.major": major,
        "cuda.driver.minor": minor,
        "cuda.driver.rev": rev,
    }
    if versions.cuda:
        cmajor, _, cminor = versions.cuda.partition(".")
        out |= {
            "cuda.runtime-version.major": cmajor,
            "cuda.runtime-version.minor": cminor,
            "cuda.runtime-version.full": versions.cuda,
            "cuda.runtime.major": cmajor,
            "cuda.runtime.minor": cminor,
        }
    return out


def _sharing_of(resource: str, inputs: LabelInputs) -> tuple[int, str, bool]:
    """(replicas, sharing-strategy, product gets -SHARED) of one resource."""
    replicas = inputs.replicas.get(resource, 1)
    if replicas > 1 and inputs.sharing is not SharingMode.NONE:
        return replicas, inputs.sharing.value, resource not in inputs.renamed
    return 1, SharingMode.NONE.value, False


def _full_gpu_labels(gpus: list[Gpu], inputs: LabelInputs, *, all_mig: bool) -> dict[str, str]:
    """``gpu.*`` of the node's (first) model; MIG-enabled full GPUs are listed with 0 replicas."""
    first = gpus[0]
    count = sum(1 for g in gpus if g.model == first.model)
    out: dict[str, str] = {"gpu.count": str(count)}
    if all_mig:
        replicas, strategy, shared = 0, SharingMode.NONE.value, False
    else:
        replicas, strategy, shared = _sharing_of("nvidia.com/gpu", inputs)
    out["gpu.product"] = _product(first) + ("-SHARED" if shared else "")
    out["gpu.replicas"] = str(replicas)
    out["gpu.sharing-strategy"] = strategy
    if first.memory_mib > 0:
        out["gpu.memory"] = str(first.memory_mib)
    capability = first.capability
    if capability is not None and capability[0] > 0:
        major, minor = capability
        out |= {
            "gpu.family": gpu_family(major, minor),
            "gpu.compute.major": str(major),
            "gpu.compute.minor": str(minor),
        }
    return out


def _nvml_attributes(gpus: list[Gpu], name: str) -> MigAttributes | None:
    """NVML's attributes of a MIG device of profile ``name`` (a real GPU's), if any."""
    for g in gpus:
        for m in g.mig_instances:
            if m.profile == name and m.attributes is not None:
                return m.attributes
    return None


def _mig_profile_labels(
    prefix: str,
    gpu: Gpu,
    name: str,
    *,
    count: int,
    inputs: LabelInputs,
    resource: str,
    attributes: MigAttributes | None = None,
) -> dict[str, str]:
    """One MIG resource's labels; ``.memory``, ``.multiprocessors``, ``.slices.*`` and ``.engines.*``
    from NVML's attributes of its MIG devices on a real GPU, as GFD reads them, else from the catalogue
    profile of a simulated one (which knows no engine counts)."""
    replicas, strategy, shared = _sharing_of(resource, inputs)
    suffix = name.replace("+", ".")
    out = {
        f"{prefix}.count": str(count),
        f"{prefix}.product": f"{_product(gpu)}-MIG-{suffix}" + ("-SHARED" if shared else ""),
        f"{prefix}.replicas": str(replicas),
        f"{prefix}.sharing-strategy": strategy,
    }
    if attributes is not None:
        if attributes.memory_mib > 0:
            out[f"{prefix}.memory"] = str(attributes.memory_mib)
        out |= {
            f"{prefix}.multiprocessors": str(attributes.multiprocessors),
            f"{prefix}.slices.gi": str(attributes.gi_slices),
            f"{prefix}.slices.ci": str(attributes.ci_slices),
            f"{prefix}.engines.copy": str(attributes.copy_engines),
            f"{prefix}.engines.decoder": str(attributes.decoders),
            f"{prefix}.engines.encoder": str(attributes.encoders),
            f"{prefix}.engines.jpeg": str(attributes.jpegs),
            f"{prefix}.engines.ofa": str(attributes.ofas),
        }
        return out
    try:
        prof = mig_profile(gpu.model, name)
    except InputError:
        return out
    if prof.memory_gib is not None:
        out[f"{prefix}.memory"] = str(round(prof.memory_gib * 1024))
    if prof.sm_count is not None:
        out[f"{prefix}.multiprocessors"] = str(prof.sm_count)
    out[f"{prefix}.slices.gi"] = str(prof.compute_slices)
    out[f"{prefix}.slices.ci"] = str(prof.compute_slices)
    return out


def _mig_labels(gpus: list[Gpu], inputs: LabelInputs) -> dict[str, str]:
    mig_gpus = [g for g in gpus if g.mig_enabled]
    if inputs.mig is MigMode.MIXED:
        out = _full_gpu_labels(gpus, inputs, all_mig=bool(mig_gpus) and len(mig_gpus) == len(gpus))
        counts = Counter(m.profile for g in mig_gpus for m in g.mig_instances)
        for name in sorted(counts):
            parent = next(g for g in mig_gpus if any(m.profile == name for m in g.mig_instances))
            resource = "nvidia.com/mig-" + name.replace("+", ".")
            prefix = "mig-" + name.replace("+", ".")
            out |= _mig_profile_labels(
                prefix,
                parent,
                name,
                count=counts[name],
                inputs=inputs,
                resource=resource,
                attributes=_nvml_attributes(mig_gpus, name),
            )
        return out
    # single: MIG devices are nvidia.com/gpu and override the gpu.* values
    out = _full_gpu_labels(gpus, inputs, all_mig=False)
    if not mig_gpus:
        return out
    names = {m.profile for g in mig_gpus for m in g.mig_instances}
    if len(mig_gpus) != len(gpus) or len(names) != 1 or any(not g.mig_instances for g in mig_gpus):
        out |= {
            "gpu.product": f"{_product(gpus[0])}-MIG-INVALID",
            "gpu.count": "0",
            "gpu.replicas": "0",
            "gpu.sharing-strategy": "",
            "gpu.memory": "0",
        }
        return out
    (name,) = names
    count = sum(len(g.mig_instances) for g in mig_gpus)
    single = _mig_profile_labels(
        "gpu",
        mig_gpus[0],
        name,
        count=count,
        inputs=inputs,
        resource="nvidia.com/gpu",
        attributes=_nvml_attributes(mig_gpus, name),
    )
    out |= single
    return out


_PCI_3D_CONTROLLER = 0x030200
_PCI_VGA_CONTROLLER = 0x030000


def _gpu_mode(gpus: list[Gpu]) -> str:
    """GFD's ``gpu.mode``: ``compute`` when every GPU is a 3D controller, ``graphics`` when every one
    is a VGA controller, else ``unknown`` (mixed classes, or one unread). Simulated GPUs (no class
    read, no NVML name) are the catalogue's data-centre boards: 3D controllers."""
    classes = {g.pci_class if g.pci_class is not None or g.product else _PCI_3D_CONTROLLER for g in gpus}
    if len(classes) != 1:
        return "unknown"
    return {_PCI_3D_CONTROLLER: "compute", _PCI_VGA_CONTROLLER: "graphics"}.get(classes.pop() or 0, "unknown")


def _topology_labels(node: Node) -> dict[str, str]:
    topo = node.topology
    if topo is None or not node.gpus:
        return {}
    domains = [g for g in topo.nvlink_groups if len(g) > 1]
    sizes = [len(g) for g in domains]
    out = {"nvlink-domains": str(len(domains))}
    if sizes:
        out |= {"nvlink-domain-size.max": str(max(sizes)), "nvlink-domain-size.min": str(min(sizes))}
    return out


def node_labels(
    node: Node,
    inputs: LabelInputs,
    *,
    versions: DriverVersions | None = None,
    timestamp: int | None = None,
) -> dict[str, str]:
    """Every label kubegpu sets on this node (full keys, sorted); a node without GPUs gets none."""
    gpus = list(node.gpus)
    if not gpus:
        return {}
    gfd: dict[str, str] = {"gpu.present": "true"}
    if timestamp is not None:
        gfd["gfd.timestamp"] = str(timestamp)
    if versions is None and node.driver_version:
        versions = DriverVersions(driver=node.driver_version, cuda=node.cuda_version)
    gfd |= _versions(versions)
    gfd["mig.capable"] = "true" if any(g.can_mig for g in gpus) else "false"
    mps_capable = inputs.sharing is SharingMode.MPS and not any(g.mig_enabled for g in gpus)
    gfd["mps.capable"] = "true" if mps_capable else "false"
    if node.machine is not None:
        gfd["gpu.machine"] = sanitise(node.machine) or "unknown"
    gfd["gpu.mode"] = _gpu_mode(gpus)
    # kubegpu does not detect vGPU guests (GFD reads vGPU capabilities from PCI config space): a
    # deliberate difference, docs/compat.md
    gfd["vgpu.present"] = "false"
    if inputs.mig is MigMode.NONE:
        # As GFD: MIG-enabled GPUs are listed with 0 replicas, so an all-MIG node has gpu.replicas=0.
        gfd |= _full_gpu_labels(gpus, inputs, all_mig=all(g.mig_enabled for g in gpus))
    else:
        gfd |= _mig_labels(gpus, inputs)
        gfd["mig.strategy"] = inputs.mig.value
    out = {GFD_PREFIX + k: v for k, v in gfd.items()}
    out |= {KUBEGPU_PREFIX + k: v for k, v in _topology_labels(node).items()}
    return dict(sorted(out.items()))
