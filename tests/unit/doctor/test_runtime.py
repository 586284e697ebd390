"""Container-runtime checks: toolkit, containerd, CDI and Docker, each broken the way the seeds describe."""

from __future__ import annotations

import textwrap

from kubegpu.doctor import Status, node_report
from kubegpu.doctor.finding import Finding
from tests.unit.doctor.fakehost import FakeHost

RUNC_ONLY = textwrap.dedent(
    """\
    version = 2
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    """
)


def finding(host: FakeHost, check_id: str) -> Finding:
    return node_report(host.root).by_id(check_id)


def test_missing_container_toolkit_fails_with_install_steps(host: FakeHost) -> None:
    host.remove("usr/bin/nvidia-ctk")
    host.remove("usr/bin/nvidia-container-runtime")
    f = finding(host, "runtime.toolkit")
    assert f.status is Status.FAIL
    assert "apt-get install -y nvidia-container-toolkit" in f.fix
    assert "nvidia-ctk runtime configure" in f.fix


def test_toolkit_installed_by_the_gpu_operator_counts(host: FakeHost) -> None:
    host.remove("usr/bin/nvidia-ctk")
    host.remove("usr/bin/nvidia-container-runtime")
    path = host.write("usr/local/nvidia/toolkit/nvidia-container-runtime", "#!/bin/sh\n")
    path.chmod(0o755)
    assert finding(host, "runtime.toolkit").status is Status.OK


def test_containerd_without_nvidia_runtime_fails_with_nvidia_ctk_configure(host: FakeHost) -> None:
    host.write("etc/containerd/config.toml", RUNC_ONLY)
    f = finding(host, "runtime.containerd")
    assert f.status is Status.FAIL
    assert "no nvidia runtime" in f.summary
    assert "nvidia-ctk runtime configure --runtime=containerd" in f.fix
    assert "systemctl restart containerd" in f.fix


def test_nvidia_runtime_that_is_not_default_warns_and_offers_a_runtimeclass(host: FakeHost) -> None:
    text = (host.root / "etc/containerd/config.toml").read_text()
    host.write(
        "etc/containerd/config.toml",
        text.replace('default_runtime_name = "nvidia"', 'default_runtime_name = "runc"'),
    )
    f = finding(host, "runtime.containerd")
    assert f.status is Status.WARN
    assert "runtimeClassName: nvidia" in f.summary
    assert "kind: RuntimeClass" in f.fix and "--set-as-default" in f.fix


def test_containerd_2_config_with_nvidia_in_a_drop_in_passes(host: FakeHost) -> None:
    host.write(
        "etc/containerd/config.toml",
        'version = 3\nimports = ["/etc/containerd/conf.d/*.toml"]\n',
    )
    host.write(
        "etc/containerd/conf.d/99-nvidia.toml",
        textwrap.dedent(
            """\
            version = 3
            [plugins."io.containerd.cri.v1.runtime".containerd]
              default_runtime_name = "nvidia"
            [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]
              BinaryName = "/usr/bin/nvidia-container-runtime"
            """
        ),
    )
    f = finding(host, "runtime.containerd")
    assert f.status is Status.OK, f
    assert any("99-nvidia.toml" in e for e in f.evidence)


def test_containerd_without_config_file_runs_defaults_and_fails(host: FakeHost) -> None:
    host.remove("etc/containerd/config.toml")
    f = finding(host, "runtime.containerd")
    assert f.status is Status.FAIL
    assert "built-in defaults" in f.summary


def test_broken_containerd_toml_names_the_line(host: FakeHost) -> None:
    host.write("etc/containerd/config.toml", "version = 2\n[plugins\n")
    f = finding(host, "runtime.containerd")
    assert f.status is Status.FAIL
    assert any("/etc/containerd/config.toml" in e and "line 2" in e for e in f.evidence)


def test_nvidia_runtime_pointing_at_missing_binary_fails(host: FakeHost) -> None:
    host.remove("usr/bin/nvidia-container-runtime")
    f = finding(host, "runtime.containerd")
    assert f.status is Status.FAIL
    assert "/usr/bin/nvidia-container-runtime" in f.summary


def test_host_without_containerd_skips_the_containerd_check(host: FakeHost) -> None:
    host.remove("etc/containerd/config.toml")
    host.remove("usr/bin/containerd")
    assert finding(host, "runtime.containerd").status is Status.SKIP


def test_missing_cdi_spec_warns_with_generate_command(host: FakeHost) -> None:
    host.remove("etc/cdi/nvidia.yaml")
    f = finding(host, "runtime.cdi")
    assert f.status is Status.WARN
    assert "nvidia-ctk cdi generate" in f.fix


def test_cdi_spec_for_other_gpus_is_stale(host: FakeHost) -> None:
    host.cdi_spec(["0", "1", "2", "3"])
    f = finding(host, "runtime.cdi")
    assert f.status is Status.FAIL
    assert any("describes 4 GPU(s), the host has 2" in e for e in f.evidence)


def test_cdi_spec_from_before_a_driver_upgrade_is_stale(host: FakeHost) -> None:
    host.cdi_spec(["0", "1"], lib="/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.183.01")
    f = finding(host, "runtime.cdi")
    assert f.status is Status.FAIL
    assert any("libnvidia-ml.so.535.183.01 does not exist" in e for e in f.evidence)


def test_the_agents_own_cdi_spec_is_read_and_not_held_to_the_hosts_gpu_count(host: FakeHost) -> None:
    """kubegpu's agent writes a spec of the devices it advertises (MIG devices, index names) under its
    own kind: found (no "no CDI spec" warning), its files checked, its device count not compared."""
    host.remove("etc/cdi/nvidia.yaml")
    host.write(
        "var/run/cdi/k8s.device-plugin.kubegpu.io-gpu_kubegpu-agent.json",
        '{"cdiVersion": "0.6.0", "kind": "k8s.device-plugin.kubegpu.io/gpu", "devices": ['
        '{"name": "MIG-1", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},'
        '{"name": "MIG-2", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},'
        '{"name": "MIG-3", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]}}]}',
    )
    f = finding(host, "runtime.cdi")
    assert f.status is Status.OK, f
    assert any("k8s.device-plugin.kubegpu.io/gpu" in e for e in f.evidence)
    host.write(
        "var/run/cdi/k8s.device-plugin.kubegpu.io-gpu_kubegpu-agent.json",
        '{"cdiVersion": "0.6.0", "kind": "k8s.device-plugin.kubegpu.io/gpu", "devices": ['
        '{"name": "GPU-a", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia7"}]}}]}',
    )
    f = finding(host, "runtime.cdi")
    assert f.status is Status.FAIL
    assert any("device node /dev/nvidia7 does not exist" in e for e in f.evidence)


def test_unparsable_cdi_spec_fails(host: FakeHost) -> None:
    host.write("var/run/cdi/nvidia.json", "{not json")
    f = finding(host, "runtime.cdi")
    assert f.status is Status.FAIL
    assert any("/var/run/cdi/nvidia.json" in e for e in f.evidence)


def test_docker_through_cri_dockerd_without_nvidia_runtime_fails(host: FakeHost) -> None:
    host.write("etc/docker/daemon.json", '{"log-driver": "json-file"}')
    host.command("cri-dockerd")
    f = finding(host, "runtime.docker")
    assert f.status is Status.FAIL
    assert "nvidia-ctk runtime configure --runtime=docker" in f.fix


def test_docker_without_nvidia_runtime_only_warns_when_kubelet_does_not_use_it(host: FakeHost) -> None:
    host.write("etc/docker/daemon.json", "{}")
    assert finding(host, "runtime.docker").status is Status.WARN


def test_docker_with_nvidia_runtime_passes(host: FakeHost) -> None:
    host.write(
        "etc/docker/daemon.json",
        '{"default-runtime": "nvidia", '
        '"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}',
    )
    f = finding(host, "runtime.docker")
    assert f.status is Status.OK and "'nvidia'" in f.summary


def test_broken_daemon_json_names_line_and_column(host: FakeHost) -> None:
    host.write("etc/docker/daemon.json", '{\n  "runtimes": {,\n}')
    f = finding(host, "runtime.docker")
    assert f.status is Status.FAIL
    assert "line 2" in f.summary


def test_containerd_binary_name_of_the_wrong_type_fails_naming_file_and_key(host: FakeHost) -> None:
    host.write(
        "etc/containerd/config.toml",
        textwrap.dedent(
            """\
            version = 2
            [plugins."io.containerd.grpc.v1.cri".containerd]
              default_runtime_name = "nvidia"
            [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
              BinaryName = 5
            """
        ),
    )
    f = finding(host, "runtime.containerd")
    assert f.status is Status.FAIL
    assert "/etc/containerd/config.toml" in f.summary
    assert "runtimes.nvidia.options.BinaryName = 5 is not a string" in f.summary


def test_docker_default_runtime_of_the_wrong_type_fails_naming_file_and_key(host: FakeHost) -> None:
    host.write(
        "etc/docker/daemon.json",
        '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "default-runtime": ["nvidia"]}',
    )
    f = finding(host, "runtime.docker")
    assert f.status is Status.FAIL
    assert "/etc/docker/daemon.json" in f.summary
    assert "default-runtime is a list, not a string" in f.summary


def test_docker_runtime_that_is_not_an_object_fails(host: FakeHost) -> None:
    host.write("etc/docker/daemon.json", '{"runtimes": {"nvidia": 5}}')
    f = finding(host, "runtime.docker")
    assert f.status is Status.FAIL
    assert "runtimes.nvidia is the number 5, not an object" in f.summary
