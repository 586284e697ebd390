"""A fixture host root in a temporary directory: the files and commands the doctor reads on a node.

``FakeHost.healthy`` builds a two-GPU node on which every node check passes; tests then break one
thing (a row of the seeds' troubleshooting tables) and assert the finding that names it.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

KERNEL = "5.15.0-105-generic"
DRIVER = "550.90.07"
GPUS = ("0000:3b:00.0", "0000:86:00.0")


def smi_csv(rows: list[tuple[str, str, str]]) -> str:
    """nvidia-smi --query-gpu output for (index, bus id, persistence) rows."""
    return "".join(
        f"{i}, 00000000:{bus[5:].upper()}, NVIDIA H100 80GB HBM3, {DRIVER}, {pm}\n" for i, bus, pm in rows
    )


class FakeHost:
    """Writes a host's files under ``root``; commands are shell scripts in ``root/usr/bin``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, rel: str, text: str = "") -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def remove(self, rel: str) -> None:
        (self.root / rel).unlink()

    def command(
        self, name: str, stdout: str = "", *, exit_code: int = 0, stderr: str = "", body: str = ""
    ) -> None:
        """A command that prints ``stdout``/``stderr`` and exits ``exit_code`` (or runs ``body``)."""
        script = "#!/bin/sh\n" + (body or "")
        if stdout:
            script += f"cat <<'__OUT__'\n{stdout.rstrip(chr(10))}\n__OUT__\n"
        if stderr:
            script += f"cat >&2 <<'__ERR__'\n{stderr.rstrip(chr(10))}\n__ERR__\n"
        script += f"exit {exit_code}\n"
        path = self.write(f"usr/bin/{name}", script)
        path.chmod(0o755)

    def pci(
        self, bus: str, *, vendor: str = "0x10de", klass: str = "0x030200", device: str = "0x2330"
    ) -> None:
        for name, value in (("vendor", vendor), ("class", klass), ("device", device)):
            self.write(f"sys/bus/pci/devices/{bus}/{name}", value + "\n")

    def modules(self, *names: str) -> None:
        lines = [f"{n} 1234 0 - Live 0x0000000000000000 (POE)" for n in names]
        self.write("proc/modules", "\n".join([*lines, "ext4 999 1 - Live 0x0"]) + "\n")

    def nvidia_smi(self, rows: list[tuple[str, str, str]] | None = None) -> None:
        if rows is None:
            rows = [(str(i), bus, "Enabled") for i, bus in enumerate(GPUS)]
        self.command("nvidia-smi", smi_csv(rows))

    def kern_log(self, *lines: str) -> None:
        base = ["Nov 30 06:00:01 gpu-node-1 kernel: [    0.000000] Linux version " + KERNEL]
        self.write("var/log/kern.log", "\n".join(base + list(lines)) + "\n")

    def touch_socket(self, name: str, mtime: float) -> None:
        path = self.write(f"var/lib/kubelet/device-plugins/{name}")
        os.utime(path, (mtime, mtime))

    @classmethod
    def healthy(cls, root: Path) -> FakeHost:
        host = cls(root)
        for bus in GPUS:
            host.pci(bus)
        host.pci("0000:00:00.0", vendor="0x8086", klass="0x060000", device="0x2020")  # host bridge
        host.pci("0000:c1:00.0", klass="0x068000", device="0x22a3")  # an NVSwitch: NVIDIA but no GPU
        host.modules("nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia")
        host.write("proc/sys/kernel/osrelease", KERNEL + "\n")
        host.write("proc/cmdline", f"BOOT_IMAGE=/vmlinuz-{KERNEL} root=/dev/sda1 ro quiet\n")
        host.write(f"lib/modules/{KERNEL}/modules.dep", "updates/dkms/nvidia.ko: \nkernel/fs/ext4/ext4.ko:\n")
        host.write("etc/modprobe.d/blacklist-nouveau.conf", "blacklist nouveau\noptions nouveau modeset=0\n")
        host.write("sys/module/nvidia/version", DRIVER + "\n")
        host.write(
            "proc/driver/nvidia/version",
            f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {DRIVER}  Fri May 31 09:35:42 UTC 2024\n"
            "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n",
        )
        host.write(f"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{DRIVER}")
        for dev in ("nvidiactl", "nvidia0", "nvidia1", "nvidia-uvm", "nvidia-uvm-tools"):
            host.write(f"dev/{dev}")
        host.nvidia_smi()
        host.kern_log(
            "Nov 30 06:00:02 gpu-node-1 kernel: [    2.0] nvidia-nvlink: Nvlink Core is being initialized"
        )
        host.command("nvidia-ctk", "NVIDIA Container Toolkit CLI version 1.16.2")
        host.command("nvidia-container-runtime")
        host.command("containerd")
        host.write(
            "etc/containerd/config.toml",
            textwrap.dedent(
                """\
                version = 2
                [plugins."io.containerd.grpc.v1.cri".containerd]
                  default_runtime_name = "nvidia"
                [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
                  runtime_type = "io.containerd.runc.v2"
                [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
                  runtime_type = "io.containerd.runc.v2"
                [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
                  BinaryName = "/usr/bin/nvidia-container-runtime"
                """
            ),
        )
        host.cdi_spec(["0", "1"])
        host.touch_socket("kubelet.sock", 1_000_000)
        host.touch_socket("nvidia-gpu.sock", 1_000_100)
        host.write("etc/hostname", "gpu-node-1\n")
        return host

    def cdi_spec(
        self, names: list[str], *, lib: str = f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{DRIVER}"
    ) -> None:
        devices = "".join(
            f'  - name: "{n}"\n    containerEdits:\n      deviceNodes:\n      - path: /dev/nvidia{n}\n'
            for n in names
        )
        self.write(
            "etc/cdi/nvidia.yaml",
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
            + devices
            + "  - name: all\n    containerEdits:\n      deviceNodes:\n      - path: /dev/nvidia0\n"
            "containerEdits:\n  deviceNodes:\n  - path: /dev/nvidiactl\n  - path: /dev/nvidia-uvm\n"
            f"  mounts:\n  - hostPath: {lib}\n    containerPath: {lib}\n"
            "    options: [ro, nosuid, nodev, bind]\n",
        )
