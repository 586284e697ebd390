"""The rig's build script (tests/e2e/rig/build.sh) against a stand-in Go toolchain.

Why: a cold build takes twenty minutes, so its failure modes (two builds on one cache, a binary that
does not run, a cached binary that was truncated, a step silent for minutes) cannot be found by running
it for real in the fast suite. The stand-in `go` below does what the script asks of the real one
(`mod init|edit|download -json|tidy`, `build -o OUT`) and writes tiny shell programs that print the
version the way the real binaries do; each test then runs the real script as a subprocess.
"""

from __future__ import annotations

import os
import stat
import subprocess
import textwrap
import threading
from pathlib import Path

import pytest

BUILD_SH = Path(__file__).resolve().parents[2] / "e2e" / "rig" / "build.sh"
K8S = "v1.34.4"
ETCD = "v3.6.16"
CTRD = "v2.4.2"
KWOK = "v0.8.0"
K8S_CMDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl")
CTRD_CMDS = ("containerd", "containerd-shim-runc-v2", "ctr")
ALL = ("etcd", *CTRD_CMDS, *K8S_CMDS, "kwok")

pytestmark = pytest.mark.integration

FAKE_GO = r"""#!/usr/bin/env bash
# A stand-in for `go`: enough of it for build.sh. Logs every `build` (name and -tags) to $FAKE_GO_LOG.
set -euo pipefail
case "$1" in
  mod)
    case "$2" in
      init|edit) exit 0 ;;
      tidy) sleep "${FAKE_GO_TIDY_S:-0}"; exit 0 ;;
      download) printf '{\n\t"GoMod": "%s",\n}\n' "$FAKE_GO_UPSTREAM_MOD"; exit 0 ;;
    esac ;;
  build)
    shift; out=""; tags=""
    while (( $# > 1 )); do
      case "$1" in -o) out=$2; shift 2 ;; -tags) tags=$2; shift 2 ;; -ldflags) shift 2 ;; *) shift ;; esac
    done
    pkg=$1; name=${pkg##*/}; [[ "$pkg" == go.etcd.io/* ]] && name=etcd
    echo "$name $tags" >> "$FAKE_GO_LOG"
    sleep "${FAKE_GO_BUILD_S:-0}"
    if [[ "${FAKE_GO_FAIL:-}" == "$name" ]]; then echo "compile error in $name" >&2; exit 1; fi
    if [[ "${FAKE_GO_BROKEN:-}" == "$name" ]]; then
      printf 'not a program' > "$out"; chmod +x "$out"; exit 0
    fi
    case "$name" in
      etcd) body='echo "etcd Version: ${ETCD#v}"; echo "Git SHA: fake"' ;;
      kubectl) body='echo "Client Version: $K8S"; echo "Kustomize Version: v5"' ;;
      containerd) body='echo "containerd github.com/containerd/containerd/v2 $CTRD module"' ;;
      ctr) body='echo "ctr github.com/containerd/containerd/v2 $CTRD"' ;;
      containerd-shim-runc-v2) body='printf "%s:\n  Version:  $CTRD\n  Revision: module\n" "$0"' ;;
      *) body='echo "Kubernetes $K8S"' ;;
    esac
    printf '#!/bin/sh\n%s\n' "$body" > "$out"; chmod +x "$out"; exit 0 ;;
  install)
    # `go install [flags] sigs.k8s.io/kwok/cmd/kwok@VER` into $GOBIN (kwok: upstream's own module)
    pkg=${@: -1}; pkg=${pkg%@*}; name=${pkg##*/}
    echo "$name install" >> "$FAKE_GO_LOG"
    sleep "${FAKE_GO_BUILD_S:-0}"
    if [[ "${FAKE_GO_FAIL:-}" == "$name" ]]; then echo "compile error in $name" >&2; exit 1; fi
    [[ -n "${GOBIN:-}" ]] || { echo "fake go: install without GOBIN" >&2; exit 2; }
    if [[ "${FAKE_GO_BROKEN:-}" == "$name" ]]; then
      printf 'not a program' > "$GOBIN/$name"; chmod +x "$GOBIN/$name"; exit 0
    fi
    printf '#!/bin/sh\necho "kwok version $KWOK go1.26.8 (linux/amd64)"\n' > "$GOBIN/$name"
    chmod +x "$GOBIN/$name"; exit 0 ;;
esac
echo "fake go: unexpected: $*" >&2; exit 2
"""


class FakeToolchain:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.cache = root / "cache"
        self.go = root / "go"
        self.build_log = root / "builds.log"
        script = (
            FAKE_GO.replace("${ETCD#v}", ETCD.removeprefix("v"))
            .replace("$K8S", K8S)
            .replace("$CTRD", CTRD)
            .replace("$KWOK", KWOK)
        )
        self.go.write_text(script)
        self.go.chmod(self.go.stat().st_mode | stat.S_IXUSR)
        upstream = root / "upstream.mod"
        upstream.write_text(
            textwrap.dedent(
                """\
                module k8s.io/kubernetes
                require (
                \tk8s.io/api v0.0.0
                \tk8s.io/client-go v0.0.0
                )
                """
            )
        )
        self.env = {
            "PATH": os.environ["PATH"],
            "HOME": str(root),
            "GO": str(self.go),
            "KUBEGPU_RIG_CACHE": str(self.cache),
            "KUBEGPU_RIG_K8S_VERSION": K8S,
            "KUBEGPU_RIG_ETCD_VERSION": ETCD,
            "KUBEGPU_RIG_CONTAINERD_VERSION": CTRD,
            "KUBEGPU_RIG_KWOK_VERSION": KWOK,
            "KUBEGPU_RIG_NICE": "0",
            "FAKE_GO_LOG": str(self.build_log),
            "FAKE_GO_UPSTREAM_MOD": str(upstream),
        }

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(BUILD_SH), *args],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def bin(self, name: str) -> Path:
        if name == "etcd":
            return self.cache / "bin" / f"etcd-{ETCD}" / "etcd"
        if name in CTRD_CMDS:
            return self.cache / "bin" / f"containerd-{CTRD}" / name
        if name == "kwok":
            return self.cache / "bin" / f"kwok-{KWOK}" / "kwok"
        return self.cache / "bin" / f"k8s-{K8S}" / name

    def builds(self) -> list[str]:
        """The names of the binaries built so far, in order."""
        return [line.split()[0] for line in self.build_tags()]

    def build_tags(self) -> list[str]:
        """One "name tags" line per `go build`."""
        return self.build_log.read_text().splitlines() if self.build_log.exists() else []


@pytest.fixture
def go(tmp_path: Path) -> FakeToolchain:
    return FakeToolchain(tmp_path)


def test_a_cold_build_yields_every_binary_verified_and_a_warm_one_builds_nothing(go: FakeToolchain) -> None:
    cold = go.run("all")
    assert cold.returncode == 0, cold.stderr
    assert sorted(go.builds()) == sorted(ALL)
    assert "verified: etcd" in cold.stderr
    assert "rig build finished" in cold.stderr
    for name in ALL:
        assert os.access(go.bin(name), os.X_OK), name
    warm = go.run("all")
    assert warm.returncode == 0, warm.stderr
    assert len(go.builds()) == len(ALL), "a warm run rebuilt something"
    assert "cached in" in warm.stderr


def test_two_builds_on_one_cache_wait_for_each_other_and_both_end_with_all_binaries(
    go: FakeToolchain,
) -> None:
    results: list[subprocess.CompletedProcess[str]] = []

    def one() -> None:
        results.append(go.run("all", FAKE_GO_BUILD_S="0.3"))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    assert sorted(go.builds()) == sorted(ALL), "a binary was built twice"
    assert any("another rig build holds" in r.stderr for r in results)
    for name in ALL:
        assert os.access(go.bin(name), os.X_OK), name


def test_a_binary_that_does_not_run_stops_the_build_naming_it_and_is_not_left_in_place(
    go: FakeToolchain,
) -> None:
    result = go.run("all", FAKE_GO_BROKEN="kube-scheduler")
    assert result.returncode != 0
    failed = [line for line in result.stderr.splitlines() if "FAILED" in line]
    assert len(failed) == 1 and "kube-scheduler" in failed[0], result.stderr
    assert "finished" not in result.stderr
    assert not go.bin("kube-scheduler").exists()
    assert not list(go.bin("kube-scheduler").parent.glob("*.tmp.*")), "a temporary file was left"


def test_a_failed_compile_names_the_binary(go: FakeToolchain) -> None:
    result = go.run("all", FAKE_GO_FAIL="kubelet")
    assert result.returncode != 0
    assert "kubelet: go build exited non-zero" in result.stderr
    assert "finished" not in result.stderr


def test_a_truncated_cached_binary_is_rebuilt_and_the_rest_are_kept(go: FakeToolchain) -> None:
    assert go.run("all").returncode == 0
    go.bin("etcd").write_bytes(b"\x7fELF truncated")
    result = go.run("all")
    assert result.returncode == 0, result.stderr
    assert go.builds().count("etcd") == 2
    assert all(go.builds().count(c) == 1 for c in K8S_CMDS)
    assert "rebuilding it" in result.stderr


def test_containerd_is_built_without_cgo_only_parts_and_its_shim_without_grpc(go: FakeToolchain) -> None:
    result = go.run("containerd")
    assert result.returncode == 0, result.stderr
    tags = dict(line.split(" ", 1) for line in go.build_tags())
    assert sorted(tags) == sorted(CTRD_CMDS)
    for name in CTRD_CMDS:
        assert {"no_btrfs", "no_devmapper", "no_zfs"} <= set(tags[name].split(",")), name
    assert "no_grpc" in tags["containerd-shim-runc-v2"].split(",")
    assert "no_grpc" not in tags["containerd"].split(",")


def test_a_shim_that_reports_another_version_is_rebuilt(go: FakeToolchain) -> None:
    assert go.run("all").returncode == 0
    go.bin("containerd-shim-runc-v2").write_text("#!/bin/sh\necho '  Version:  v2.3.0'\n")
    result = go.run("all")
    assert result.returncode == 0, result.stderr
    assert go.builds().count("containerd-shim-runc-v2") == 2
    assert go.builds().count("containerd") == 1 and go.builds().count("ctr") == 1


def test_a_build_of_one_version_does_not_wait_for_a_build_of_another(go: FakeToolchain) -> None:
    slow = threading.Thread(target=go.run, args=("k8s",), kwargs={"FAKE_GO_BUILD_S": "1"})
    slow.start()
    try:
        for _ in range(100):  # until the k8s build holds its lock
            if go.builds():
                break
            threading.Event().wait(0.05)
        other = go.run("etcd")
    finally:
        slow.join()
    assert other.returncode == 0, other.stderr
    assert "another rig build holds" not in other.stderr
    assert go.bin("etcd").exists()


def test_versions_come_from_versions_env_and_the_environment_wins(go: FakeToolchain, tmp_path: Path) -> None:
    versions = tmp_path / "versions.env"
    versions.write_text(
        "# comment\nKUBEGPU_RIG_K8S_VERSION=v1.99.1  # newest\n"
        "KUBEGPU_RIG_ETCD_VERSION=v3.9.0\nKUBEGPU_RIG_CONTAINERD_VERSION=v2.9.9\nKUBEGPU_RIG_KWOK_VERSION=v0.9.1\n"
    )
    env = {k: v for k, v in go.env.items() if not k.endswith("_VERSION")}
    env["KUBEGPU_RIG_VERSIONS_FILE"] = str(versions)

    def print_bin(**extra: str) -> list[str]:
        proc = subprocess.run(
            ["bash", str(BUILD_SH), "print-bin"],
            env={**env, **extra},
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        return [Path(p).name for p in proc.stdout.split()]

    assert print_bin() == ["k8s-v1.99.1", "etcd-v3.9.0", "containerd-v2.9.9", "kwok-v0.9.1"]
    assert print_bin(KUBEGPU_RIG_K8S_VERSION="v1.34.4") == [
        "k8s-v1.34.4",
        "etcd-v3.9.0",
        "containerd-v2.9.9",
        "kwok-v0.9.1",
    ]
    versions.write_text("KUBEGPU_RIG_K8S_VERSION=v1.99.1\n")
    proc = subprocess.run(
        ["bash", str(BUILD_SH), "all"], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode != 0
    assert "sets no KUBEGPU_RIG_ETCD_VERSION" in proc.stderr
    assert not go.builds()


def test_build_sh_and_the_rig_read_the_same_versions() -> None:
    from tests.e2e.rig import rig as rigmod

    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "KUBEGPU_RIG_CACHE": "/c"}
    proc = subprocess.run(
        ["bash", str(BUILD_SH), "print-bin"], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    paths = rigmod.Paths(
        state=Path("/s"),
        cache=Path("/c"),
        **{f"{k}_version": v for k, v in rigmod.load_versions(environ={}).items()},
    )
    assert proc.stdout.split() == [
        str(paths.bin("kubelet").parent),
        str(paths.bin("etcd").parent),
        str(paths.bin("containerd").parent),
        str(paths.bin("kwok").parent),
    ]


def test_a_long_step_prints_progress(go: FakeToolchain) -> None:
    result = go.run("etcd", FAKE_GO_BUILD_S="2.5", KUBEGPU_RIG_PROGRESS_S="1")
    assert result.returncode == 0, result.stderr
    assert "etcd v3.6.16: still running (" in result.stderr


def test_no_go_toolchain_is_one_clear_line(go: FakeToolchain, tmp_path: Path) -> None:
    result = go.run("all", GO=str(tmp_path / "no-such-go"))
    assert result.returncode != 0
    assert "no Go toolchain" in result.stderr
    assert not go.cache.exists()


FAKE_HELM_GO = r"""#!/usr/bin/env bash
# A stand-in for `go` for deploy/tools/build-helm.sh: `build -o OUT` writes a helm that prints its version.
case "$1" in
  mod) exit 0 ;;
  build)
    shift
    while (( $# > 1 )); do case "$1" in -o) out=$2; shift 2 ;; -ldflags) shift 2 ;; *) shift ;; esac; done
    sleep "${FAKE_GO_BUILD_S:-0}"
    printf '#!/bin/sh\necho v3.22.0\n' > "$out"; chmod +x "$out"; exit 0 ;;
esac
exit 2
"""
HELM_SH = Path(__file__).resolve().parents[3] / "deploy" / "tools" / "build-helm.sh"


def test_the_helm_build_prints_progress_verifies_and_prints_only_its_path(tmp_path: Path) -> None:
    go = tmp_path / "go"
    go.write_text(FAKE_HELM_GO)
    go.chmod(0o755)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "GO": str(go),
        "KUBEGPU_RIG_CACHE": str(tmp_path / "cache"),
        "KUBEGPU_RIG_NICE": "0",
        "KUBEGPU_RIG_PROGRESS_S": "1",
        "FAKE_GO_BUILD_S": "2.5",
    }
    result = subprocess.run(
        ["bash", str(HELM_SH)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    helm = tmp_path / "cache" / "bin" / "helm-v3.22.0" / "helm"
    assert result.stdout.strip() == str(helm)
    assert "go build: still running (" in result.stderr
    assert "built and verified" in result.stderr


def test_kwok_is_go_installed_into_its_own_directory_checked_and_cached(go: FakeToolchain) -> None:
    result = go.run("kwok")
    assert result.returncode == 0, result.stderr
    assert go.build_tags() == ["kwok install"]
    assert os.access(go.bin("kwok"), os.X_OK)
    assert not list(go.bin("kwok").parent.parent.glob("kwok-*.tmp.*")), "a temporary directory was left"
    assert go.run("kwok").returncode == 0
    assert go.build_tags() == ["kwok install"], "a warm run rebuilt kwok"


def test_a_kwok_that_does_not_run_stops_the_build_and_is_not_left_in_place(go: FakeToolchain) -> None:
    result = go.run("kwok", FAKE_GO_BROKEN="kwok")
    assert result.returncode != 0
    assert "kwok v0.8.0: the built binary does not run" in result.stderr
    assert not go.bin("kwok").exists()
