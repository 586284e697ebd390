"""MIG repartitioning of real GPUs through NVML: MIG mode, GPU instances, compute instances.

``NvmlMigBackend`` is the ``MigBackend`` of ``--nvml`` nodes. It goes through ``NvmlSource``'s module
(the one NVML funnel: this module never imports ``pynvml`` itself) and, for each GPU a transition
changes, in this order:

1. destroys every compute instance, then every GPU instance, on the GPU (NVML refuses with "in use"
   while a process still runs on one: the step and the GPU are named in the ``MigApplyError``);
2. sets the MIG mode when it differs (``nvmlDeviceSetMigMode``); a mode change the driver leaves
   *pending* (it needs a GPU reset on some boards and drivers) is refused with that reason: kubegpu
   never resets a GPU;
3. creates each GPU instance with its explicit placement (``nvmlDeviceCreateGpuInstanceWithPlacement``,
   start slot and size in memory slices, in the order ``validate_layout`` placed them) and in it one
   compute instance spanning the whole GPU instance (compute-instance prefixes such as ``1c.3g.40gb``
   are not split further);
4. reads the node again and checks that every changed GPU has the profiles it was asked for.

A failure while creating destroys what was created on that GPU, so a GPU is left either with its new
layout or with MIG on and no instances, never half-built; the MIG manager then advertises what the
GPUs really have (``current``). Tested against a fake NVML only (tests/unit/sources/test_nvmlmig.py);
tests never run it against a real GPU (it destroys instances in use).
"""

from __future__ import annotations

import logging
from typing import Any

from kubegpu.errors import MigApplyError
from kubegpu.model.mig import PlacedInstance
from kubegpu.model.migparted import GpuMigTarget
from kubegpu.model.migplan import MigTransition, gpu_matches
from kubegpu.model.node import Node
from kubegpu.sources.nvml import NvmlSource, explain

__all__ = ["GI_PROFILE_CONSTANTS", "NvmlMigBackend"]

log = logging.getLogger(__name__)

# Catalogue GPU-instance profile ID (NVML's profile info ``id``) -> NVML's profile constant
# (``NVML_GPU_INSTANCE_PROFILE_*``): 1g, 1g+me (REV1), 1g with double memory (REV2), 2g, 3g, 4g, 7g.
GI_PROFILE_CONSTANTS = {19: 0x0, 20: 0x7, 15: 0x9, 14: 0x1, 9: 0x2, 5: 0x3, 0: 0x4}
# Compute slices -> ``NVML_COMPUTE_INSTANCE_PROFILE_*`` (a compute instance as large as its GI).
CI_PROFILE_CONSTANTS = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4}
_MAX_INSTANCES = 8
_IN_USE = 19  # NVML_ERROR_IN_USE


class NvmlMigBackend:
    """Applies MIG layouts to the GPUs of ``source`` (see the module docstring)."""

    def __init__(self, source: NvmlSource) -> None:
        self._source = source
        self._nv: Any = source.module

    def current(self, node: Node) -> Node:
        return self._source.read_node(node.name)

    def apply(self, node: Node, transition: MigTransition) -> Node:
        for target in transition.targets:
            self._apply_gpu(target)
        after = self._source.read_node(node.name)
        by_index = {g.index: g for g in after.gpus}
        for target in transition.targets:
            gpu = by_index.get(target.index)
            if gpu is None or not gpu_matches(gpu, target):
                have = "missing" if gpu is None else ", ".join(m.profile for m in gpu.mig_instances) or "none"
                raise MigApplyError(
                    f"GPU {target.index}: NVML reports other MIG instances than were created ({have})"
                )
        return after

    # -- one GPU ------------------------------------------------------------------------------------

    def _fail(self, index: int, step: str, exc: BaseException) -> MigApplyError:
        code = getattr(exc, "value", None)
        hint = "; a process still uses the GPU or one of its MIG devices" if code == _IN_USE else ""
        return MigApplyError(f"GPU {index}: {step} failed: {explain(exc)}{hint}")

    def _apply_gpu(self, target: GpuMigTarget) -> None:
        nv = self._nv
        i = target.index
        handle = self._source.handle(i)
        try:
            current, _pending = nv.nvmlDeviceGetMigMode(handle)
        except nv.NVMLError as exc:
            raise self._fail(i, "reading the MIG mode", exc) from exc
        enabled = current == nv.NVML_DEVICE_MIG_ENABLE
        if enabled:
            self._destroy_all(i, handle)
        if enabled != target.mig_enabled:
            self._set_mode(i, handle, target.mig_enabled)
        if target.mig_enabled and target.placement is not None:
            try:
                for placed in target.placement.instances:
                    self._create(i, handle, placed)
            except MigApplyError:
                try:
                    self._destroy_all(i, handle)
                except MigApplyError as again:
                    log.error(
                        "cannot clean up a half-built MIG layout", extra={"gpu": i, "error": str(again)}
                    )
                raise
        count = len(target.placement.instances) if target.placement is not None else 0
        log.info("MIG layout applied to GPU", extra={"gpu": i, "mig": target.mig_enabled, "instances": count})

    def _set_mode(self, i: int, handle: Any, on: bool) -> None:
        nv = self._nv
        want = nv.NVML_DEVICE_MIG_ENABLE if on else nv.NVML_DEVICE_MIG_DISABLE
        word = "on" if on else "off"
        try:
            nv.nvmlDeviceSetMigMode(handle, want)
            current, pending = nv.nvmlDeviceGetMigMode(handle)
        except nv.NVMLError as exc:
            raise self._fail(i, f"switching MIG {word}", exc) from exc
        if current != want:
            state = "pending" if pending == want else "unchanged"
            raise MigApplyError(
                f"GPU {i}: MIG {word} is {state} until the GPU is reset (nvidia-smi -r -i {i}, or a "
                "reboot); kubegpu never resets a GPU"
            )

    def _create(self, i: int, handle: Any, placed: PlacedInstance) -> None:
        nv = self._nv
        gi_id, start = placed.profile.gi_profile_id, placed.start_slot
        size, compute = placed.profile.memory_slices, placed.profile.compute_slices
        what = f"creating a GPU instance (profile {gi_id}) at slot {start}"
        try:
            info = nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, GI_PROFILE_CONSTANTS[gi_id])
            placement = nv.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = start, size
            gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(handle, info.id, nv.byref(placement))
        except nv.NVMLError as exc:
            raise self._fail(i, what, exc) from exc
        try:
            ci_info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, CI_PROFILE_CONSTANTS[compute], nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
            )
            nv.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
        except nv.NVMLError as exc:
            step = f"creating the compute instance of the GPU instance at slot {start}"
            raise self._fail(i, step, exc) from exc

    def _destroy_all(self, i: int, handle: Any) -> None:
        """Destroy every compute and GPU instance of the GPU (every GI profile NVML knows for it)."""
        nv = self._nv
        for constant in sorted(set(GI_PROFILE_CONSTANTS.values())):
            try:
                info = nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant)
            except nv.NVMLError:
                continue  # a profile this GPU does not have
            try:
                instances = self._list(nv.c_nvmlGpuInstance_t, nv.nvmlDeviceGetGpuInstances, handle, info.id)
            except nv.NVMLError as exc:
                raise self._fail(i, "listing GPU instances", exc) from exc
            for gi in instances:
                self._destroy_compute_instances(i, gi)
                try:
                    nv.nvmlGpuInstanceDestroy(gi)
                except nv.NVMLError as exc:
                    raise self._fail(i, "destroying a GPU instance", exc) from exc

    def _destroy_compute_instances(self, i: int, gi: Any) -> None:
        nv = self._nv
        for constant in sorted(set(CI_PROFILE_CONSTANTS.values())):
            try:
                info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi, constant, nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
                )
            except nv.NVMLError:
                continue
            try:
                cis = self._list(
                    nv.c_nvmlComputeInstance_t, nv.nvmlGpuInstanceGetComputeInstances, gi, info.id
                )
                for ci in cis:
                    nv.nvmlComputeInstanceDestroy(ci)
            except nv.NVMLError as exc:
                raise self._fail(i, "destroying a compute instance", exc) from exc

    def _list(self, kind: Any, fn: Any, owner: Any, profile_id: int) -> list[Any]:
        """NVML's list calls fill a caller's array and count (ctypes, through the NVML module)."""
        nv = self._nv
        array = (kind * _MAX_INSTANCES)()
        count = nv.c_uint(0)
        fn(owner, profile_id, array, nv.byref(count))
        return [array[k] for k in range(int(count.value))]
