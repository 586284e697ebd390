"""Device-plugin checks on the node: has a plugin registered its socket with kubelet.

The third link of the chain (seed 001 §2.2 and §5.2 step 3): a plugin serves gRPC on a unix socket in
kubelet's device-plugin directory next to ``kubelet.sock``; without one kubelet advertises no GPUs.
The plugin pods' state and logs are checked from the cluster side (``plugin.pod`` in ``cluster``).
"""

from __future__ import annotations

from kubegpu.doctor.chain import Check
from kubegpu.doctor.finding import CheckId, Layer, Outcome, fail, ok, warn
from kubegpu.doctor.host import ID_GPU_PRESENT, NodeContext

__all__ = ["PLUGIN_NODE_CHECKS"]

ID_SOCKET = CheckId("plugin.socket")
DEVICE_PLUGIN_DIR = "var/lib/kubelet/device-plugins"


def check_socket(ctx: NodeContext) -> Outcome:
    probe = ctx.facts.probe
    shown = "/" + DEVICE_PLUGIN_DIR
    if not probe.path(DEVICE_PLUGIN_DIR).is_dir():
        return fail(
            f"{shown} does not exist: kubelet is not installed here or runs with another --root-dir",
            fix="systemctl status kubelet; if kubelet uses --root-dir=<dir>, mount <dir>/device-plugins "
            "into the device plugin pod instead of /var/lib/kubelet/device-plugins",
        )
    entries = probe.glob(DEVICE_PLUGIN_DIR, "*.sock")
    names = [p.name for p in entries]
    evidence = [
        f"ls {shown}: {' '.join(sorted(p.name for p in probe.glob(DEVICE_PLUGIN_DIR, '*'))) or '(empty)'}"
    ]
    if "kubelet.sock" not in names:
        return fail(
            f"no kubelet.sock in {shown}: kubelet is not running, so no plugin can register",
            *evidence,
            fix="systemctl status kubelet; journalctl -u kubelet -n 50",
        )
    plugins = [p for p in entries if p.name != "kubelet.sock"]
    if not plugins:
        return fail(
            f"only kubelet.sock in {shown}: no device plugin has registered, so the node advertises no "
            "nvidia.com/gpu",
            *evidence,
            fix="kubectl -n kube-system get pods -o wide | grep -iE 'nvidia-device-plugin|kubegpu'\n"
            "kubectl -n kube-system logs <plugin-pod>  # and mount /var/lib/kubelet/device-plugins into it",
        )
    kubelet_mtime = probe.path(f"{DEVICE_PLUGIN_DIR}/kubelet.sock").lstat().st_mtime
    stale = [p.name for p in plugins if p.lstat().st_mtime < kubelet_mtime]
    if stale:
        return warn(
            f"{', '.join(stale)} predate(s) kubelet.sock: kubelet restarted after the plugin registered; "
            "unless the plugin re-registered, the node's GPU count stays stale",
            *evidence,
            fix="kubectl -n kube-system delete pod <plugin-pod-on-this-node>  # it re-registers on start; "
            "if the socket is fresh but allocatable is still missing: systemctl restart kubelet",
        )
    return ok(f"device plugin socket(s) registered: {', '.join(p.name for p in plugins)}", *evidence)


PLUGIN_NODE_CHECKS: tuple[Check[NodeContext], ...] = (
    Check(id=ID_SOCKET, layer=Layer.PLUGIN, needs=(ID_GPU_PRESENT,), run=check_socket),
)
