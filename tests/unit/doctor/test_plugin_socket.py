"""plugin.socket: a device plugin registered with kubelet, seen from kubelet's socket directory."""

from __future__ import annotations

import shutil

from kubegpu.doctor import Status, node_report
from tests.unit.doctor.fakehost import FakeHost


def test_only_kubelet_sock_means_no_plugin_registered(host: FakeHost) -> None:
    host.remove("var/lib/kubelet/device-plugins/nvidia-gpu.sock")
    f = node_report(host.root).by_id("plugin.socket")
    assert f.status is Status.FAIL
    assert "no device plugin has registered" in f.summary
    assert "nvidia-device-plugin" in f.fix


def test_missing_kubelet_sock_means_kubelet_is_down(host: FakeHost) -> None:
    host.remove("var/lib/kubelet/device-plugins/kubelet.sock")
    f = node_report(host.root).by_id("plugin.socket")
    assert f.status is Status.FAIL
    assert "kubelet is not running" in f.summary


def test_missing_device_plugin_dir_fails(host: FakeHost) -> None:
    shutil.rmtree(host.root / "var/lib/kubelet")
    f = node_report(host.root).by_id("plugin.socket")
    assert f.status is Status.FAIL
    assert "--root-dir" in f.summary


def test_plugin_socket_older_than_kubelet_sock_warns_to_re_register(host: FakeHost) -> None:
    host.touch_socket("kubelet.sock", 2_000_000)
    f = node_report(host.root).by_id("plugin.socket")
    assert f.status is Status.WARN
    assert "nvidia-gpu.sock" in f.summary
    assert "systemctl restart kubelet" in f.fix
