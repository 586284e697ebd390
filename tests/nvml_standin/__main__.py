"""``python -m tests.nvml_standin``: build the C-level NVML stand-in and compile a machine for it.

python -m tests.nvml_standin build                         # prints the library's directory
python -m tests.nvml_standin machine builtin:dgx-h100 -o m  # a node spec (or a YAML machine) -> m
python -m tests.nvml_standin env builtin:dgx-h100 DIR       # both; prints `export` lines for a shell
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from kubegpu.errors import KubegpuError
from tests.nvml_standin.build import StandinBuildError, build
from tests.nvml_standin.machine import Machine


def machine_of(source: str) -> Machine:
    """A YAML machine description (``*.yaml`` with a ``gpus:`` list of NVML fields), else a node source."""
    path = Path(source)
    if path.suffix in {".yaml", ".yml"} and path.is_file():
        text = path.read_text(encoding="utf-8")
        if "bus_id:" in text:
            return Machine.from_yaml(path)
    from kubegpu.sources.spec import load_node

    return Machine.from_node(load_node(source))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.nvml_standin", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build the library; print its directory")
    m = sub.add_parser("machine", help="compile a machine for the library")
    m.add_argument("source", help="builtin:NAME, a node spec file, or a YAML machine description")
    m.add_argument("-o", "--output", type=Path, required=True)
    x = sub.add_parser("smi-xml", help="print what nvidia-smi -q -x would print for SOURCE")
    x.add_argument("source")
    e = sub.add_parser("env", help="build, compile SOURCE into DIR, print the shell exports")
    e.add_argument("source")
    e.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(build().directory)
        elif args.command == "machine":
            machine_of(args.source).write(args.output)
        elif args.command == "smi-xml":
            print(machine_of(args.source).smi_xml(), end="")
        else:
            args.directory.mkdir(parents=True, exist_ok=True)
            standin = build()
            machine = machine_of(args.source).write(args.directory / "machine.txt")
            env = standin.env(machine, KUBEGPU_NVML_EVENTS=str(args.directory / "events"),
                              KUBEGPU_NVML_FAULTS=str(args.directory / "faults"))  # fmt: skip
            for key, value in env.items():
                print(f"export {key}={shlex.quote(value)}")
    except (StandinBuildError, KubegpuError, OSError) as exc:
        print(f"nvml_standin: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
