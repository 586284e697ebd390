"""Wheels for the device check on a machine with no package registry (the lent GPU machine).

``bench/gpu_smoke.sh`` runs kubegpu from ``src/`` with the GPU machine's own ``python3``. That
interpreter may lack a package kubegpu needs, or hold an older one than the generated gRPC stubs
accept, and it cannot download anything. This script downloads, here, the wheels of kubegpu's runtime
closure for the GPU machine's Python and platform, at exactly the versions this checkout's ``.venv``
runs (so the device runs what ``make check`` tested). The first real run met typer without pydantic:
the closure is walked from the installed metadata, not written down by hand.

    .venv/bin/python bench/gpu_smoke_wheels.py --out .whl          # then carry .whl (docs/gpu-smoke.md)

Left out: what the device check does not run (kubernetes, matplotlib, highspy) and numpy, which the
GPU machine's image has (carry it with ``--with numpy`` if yours does not).
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

ROOTS = ("nvidia-ml-py", "grpcio", "protobuf", "typer", "rich", "PyYAML", "prometheus-client", "urllib3")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")  # fmt: skip


def closure(roots: list[str]) -> dict[str, str]:
    """Distribution name -> installed version, for ``roots`` and everything they require here."""
    env = {"extra": "", "platform_system": "Linux", "sys_platform": "linux"}
    found: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in found:
            continue
        try:
            found[key] = md.version(name)
        except md.PackageNotFoundError:
            sys.exit(f"gpu_smoke_wheels: {name} is not installed here; `make check` builds .venv first")
        for text in md.requires(name) or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                todo.append(req.name)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/gpu_smoke_wheels.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the wheels (e.g. .whl)")
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's Python (default 3.12)")
    parser.add_argument("--with", dest="extra", action="append", default=[], help="one more distribution")
    args = parser.parse_args(argv)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--out {args.out}: cannot create the folder: {exc.strerror or exc}")
    pins = closure([*ROOTS, *args.extra])
    specs = [f"{name}=={version}" for name, version in sorted(pins.items())]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", args.python_version, "--implementation", "cp", "-d", str(args.out)]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    print(f"[wheels] {len(specs)} distributions for Python {args.python_version}: {' '.join(specs)}")
    done = subprocess.run([*cmd, *specs], check=False)
    if done.returncode != 0:
        print("[wheels] pip download failed (see above)", file=sys.stderr)
        return 1
    print(f"[wheels] {len(list(args.out.glob('*.whl')))} wheels in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
