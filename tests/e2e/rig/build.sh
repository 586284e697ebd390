#!/usr/bin/env bash
# Build the rig's Kubernetes, etcd and containerd binaries from Go modules, cached by version.
#
# Why: there is no Docker engine and no release tarball download here; the Go module proxy is reachable,
# so kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl, etcd, containerd,
# containerd-shim-runc-v2, ctr and kwok are compiled from source through small wrapper modules (k8s.io/kubernetes
# needs staging `replace` directives; etcd's server module is `package main` with local replaces, so
# `go install` refuses it; containerd's commands are built from one wrapper the same way).
#
# Versions: tests/e2e/rig/versions.env (one line each); the environment variables of the same names
# (KUBEGPU_RIG_K8S_VERSION, KUBEGPU_RIG_ETCD_VERSION, KUBEGPU_RIG_CONTAINERD_VERSION,
# KUBEGPU_RIG_KWOK_VERSION) override it.
#
# Output: $KUBEGPU_RIG_CACHE/bin/k8s-<ver>/{kube-apiserver,...,kubectl}, bin/etcd-<ver>/etcd and
# bin/containerd-<ver>/{containerd,containerd-shim-runc-v2,ctr} and bin/kwok-<ver>/kwok.
#
# Safe to run twice at once on one cache: one lock per output directory ($CACHE/.build-<dir>.lock, taken
# only when something there must be built) serialises builds of the same version, and the second one
# finds the first one's binaries; a build of one version never waits for a build of another. Each binary
# is built under a temporary name and renamed into place (atomic), so a binary at its final path is always
# whole. Before saying "finished", every binary is run
# once (`--version`) and must report the expected version; a cached binary that fails this is rebuilt,
# and one that fails after its build stops the build with one line naming it. A warm run returns at once.
# Long `go build` steps print a progress line at least every 30 s.
set -euo pipefail

LOG_TAG=rig-build
# shellcheck source=../../../deploy/tools/gobuild.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../../deploy/tools/gobuild.sh"

# versions.env: NAME=value lines; a variable already set in the environment wins.
VERSIONS_FILE="${KUBEGPU_RIG_VERSIONS_FILE:-$(dirname "${BASH_SOURCE[0]}")/versions.env}"
[[ -f "$VERSIONS_FILE" ]] || die "no versions file $VERSIONS_FILE"
while IFS= read -r line || [[ -n "$line" ]]; do
  line="${line%%#*}"
  [[ "$line" =~ ^[[:space:]]*(KUBEGPU_RIG_[A-Z0-9_]+)=([^[:space:]]+)[[:space:]]*$ ]] || continue
  [[ -n "${!BASH_REMATCH[1]:-}" ]] || printf -v "${BASH_REMATCH[1]}" '%s' "${BASH_REMATCH[2]}"
done < "$VERSIONS_FILE"
for v in KUBEGPU_RIG_K8S_VERSION KUBEGPU_RIG_ETCD_VERSION KUBEGPU_RIG_CONTAINERD_VERSION KUBEGPU_RIG_KWOK_VERSION; do
  [[ -n "${!v:-}" ]] || die "$VERSIONS_FILE sets no $v (and the environment does not either)"
done
K8S_VERSION="$KUBEGPU_RIG_K8S_VERSION"
ETCD_VERSION="$KUBEGPU_RIG_ETCD_VERSION"
CONTAINERD_VERSION="$KUBEGPU_RIG_CONTAINERD_VERSION"
KWOK_VERSION="$KUBEGPU_RIG_KWOK_VERSION"

K8S_BIN="$CACHE/bin/k8s-$K8S_VERSION"
ETCD_BIN="$CACHE/bin/etcd-$ETCD_VERSION"
CONTAINERD_BIN="$CACHE/bin/containerd-$CONTAINERD_VERSION"
KWOK_BIN="$CACHE/bin/kwok-$KWOK_VERSION"
K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
CONTAINERD_CMDS=(containerd containerd-shim-runc-v2 ctr)

# The version a binary reports, or nothing when it cannot run. $2: which program it is (default: its name).
reported_version() {
  local bin=$1 name=${2:-$(basename "$1")}
  [[ -x "$bin" ]] || return 0
  case "$name" in
    kubectl) timeout 20 "$bin" version --client 2>/dev/null | sed -n 's/^Client Version: //p' | head -1 ;;
    etcd) timeout 20 "$bin" --version 2>/dev/null | sed -n 's/^etcd Version: //p' | head -1 ;;
    # "containerd github.com/containerd/containerd/v2 v2.4.2 <revision>", "ctr github.com/... v2.4.2"
    containerd | ctr) timeout 20 "$bin" --version 2>/dev/null | awk 'NR == 1 {print $3}' ;;
    # "containerd-shim-runc-v2:" then "  Version:  v2.4.2"
    containerd-shim-runc-v2) timeout 20 "$bin" -v 2>/dev/null | sed -n 's/^ *Version: *//p' | head -1 ;;
    # "kwok version v0.8.0 go1.26.8 (linux/amd64)"
    kwok) timeout 20 "$bin" --version 2>/dev/null | awk 'NR == 1 {print $3}' ;;
    *) timeout 20 "$bin" --version 2>/dev/null | sed -n 's/^Kubernetes //p' | head -1 ;;
  esac || true
}

# True when binary $1 (program $3, default its name) runs and reports version $2 (etcd omits the v).
version_ok() {
  local got
  got="$(reported_version "$1" "${3:-}")"
  [[ -n "$got" && ( "$got" == "$2" || "v$got" == "$2" ) ]]
}

# Build one binary atomically: compile to a temporary file beside the final path, check it, rename.
build_one() {
  local what=$1 out=$2 want=$3; shift 3
  local tmp="$out.tmp.$$"
  mkdir -p "$(dirname "$out")"
  rm -f "$tmp"
  local t1=$SECONDS
  log "$what: building"
  with_progress "$what" nice -n "$NICE" "$GO" build -o "$tmp" "$@" \
    || { rm -f "$tmp"; die "$what: go build exited non-zero (output above)"; }
  local name
  name="$(basename "$out")"
  version_ok "$tmp" "$want" "$name" \
    || { local got; got="$(reported_version "$tmp" "$name")"; rm -f "$tmp"
         die "$what: the built binary does not run or reports '${got:-nothing}' instead of $want"; }
  mv -f "$tmp" "$out"
  log "$what: built in $((SECONDS - t1)) s"
}

prepare_k8s_module() {
  local w=$1 minor=$2
  mkdir -p "$w"
  cd "$w"
  log "kubernetes $K8S_VERSION: preparing wrapper module in $w"
  [[ -f go.mod ]] || "$GO" mod init kubegpu.local/rig-k8s >/dev/null 2>&1
  "$GO" mod edit -go=1.24 -require="k8s.io/kubernetes@$K8S_VERSION"
  local upstream_mod
  upstream_mod="$(with_progress "kubernetes $K8S_VERSION: go mod download" \
    "$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -f "$upstream_mod" ]] || die "cannot find go.mod of k8s.io/kubernetes@$K8S_VERSION (Go module proxy reachable?)"
  # Every staging module is required at v0.0.0 upstream; pin each to v0.<minor>.<patch>.
  local m patch
  patch="$(echo "$K8S_VERSION" | cut -d. -f3)"
  for m in $(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$upstream_mod" | sort -u); do
    "$GO" mod edit -replace="$m=$m@v0.$minor.$patch"
  done
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
  log "kubernetes $K8S_VERSION: go mod tidy"
  with_progress "kubernetes $K8S_VERSION: go mod tidy" nice -n "$NICE" "$GO" mod tidy \
    || die "kubernetes $K8S_VERSION: go mod tidy failed (output above)"
}

# Which of the binaries $4... in directory $1 do not run or report another version than $2 (one per
# line). $3 is --say (log each one that exists but is stale as being rebuilt) or --quiet.
stale() {
  local dir=$1 want=$2 say=$3 c; shift 3
  for c in "$@"; do
    version_ok "$dir/$c" "$want" && continue
    [[ "$say" == --say && -e "$dir/$c" ]] && log "cached $dir/$c does not run or has another version; rebuilding it"
    echo "$c"
  done
}

build_k8s() {
  [[ -n "$(stale "$K8S_BIN" "$K8S_VERSION" --quiet "${K8S_CMDS[@]}")" ]] \
    || { log "kubernetes $K8S_VERSION: cached in $K8S_BIN"; return; }
  lock_dir "$K8S_BIN"
  local todo=()
  mapfile -t todo < <(stale "$K8S_BIN" "$K8S_VERSION" --say "${K8S_CMDS[@]}")
  if (( ${#todo[@]} == 0 )); then unlock_dir; log "kubernetes $K8S_VERSION: cached in $K8S_BIN"; return; fi
  local t0=$SECONDS minor w="$CACHE/src/k8s-$K8S_VERSION"
  minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
  prepare_k8s_module "$w" "$minor"
  local vpkg ldf date c
  date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  ldf="-s -w"
  for vpkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf+=" -X $vpkg.gitVersion=$K8S_VERSION -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor"
    ldf+=" -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=$date"
  done
  for c in "${todo[@]}"; do
    build_one "kubernetes $K8S_VERSION: $c" "$K8S_BIN/$c" "$K8S_VERSION" \
      -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ldf" "k8s.io/kubernetes/cmd/$c"
  done
  unlock_dir
  log "kubernetes $K8S_VERSION: ${#todo[@]} binaries built in $((SECONDS - t0)) s"
}

build_etcd() {
  [[ -n "$(stale "$ETCD_BIN" "$ETCD_VERSION" --quiet etcd)" ]] \
    || { log "etcd $ETCD_VERSION: cached in $ETCD_BIN"; return; }
  lock_dir "$ETCD_BIN"
  if [[ -z "$(stale "$ETCD_BIN" "$ETCD_VERSION" --say etcd)" ]]; then
    unlock_dir; log "etcd $ETCD_VERSION: cached in $ETCD_BIN"; return
  fi
  local t0=$SECONDS w="$CACHE/src/etcd-$ETCD_VERSION"
  mkdir -p "$w"
  cd "$w"
  [[ -f go.mod ]] || "$GO" mod init kubegpu.local/rig-etcd >/dev/null 2>&1
  "$GO" mod edit -go=1.24 -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  log "etcd $ETCD_VERSION: go mod tidy"
  with_progress "etcd $ETCD_VERSION: go mod tidy" nice -n "$NICE" "$GO" mod tidy \
    || die "etcd $ETCD_VERSION: go mod tidy failed (output above)"
  build_one "etcd $ETCD_VERSION" "$ETCD_BIN/etcd" "$ETCD_VERSION" \
    -trimpath -ldflags "-s -w" go.etcd.io/etcd/server/v3
  unlock_dir
  log "etcd $ETCD_VERSION: tidy and build took $((SECONDS - t0)) s"
}

# containerd 2.x, its runc shim and ctr, from github.com/containerd/containerd/v2 (no replaces upstream,
# so a wrapper that requires it resolves to upstream's own dependency versions). CGO_ENABLED=0 like the
# rest: the btrfs snapshotter is the one part that needs cgo and drops out by itself; devmapper and zfs
# are left out (no_devmapper, no_zfs) because the rig uses overlayfs. Tags and the shim's no_grpc follow
# upstream's Makefile; the -X flags give `--version` the release's version (upstream sets them likewise).
build_containerd() {
  [[ -n "$(stale "$CONTAINERD_BIN" "$CONTAINERD_VERSION" --quiet "${CONTAINERD_CMDS[@]}")" ]] \
    || { log "containerd $CONTAINERD_VERSION: cached in $CONTAINERD_BIN"; return; }
  lock_dir "$CONTAINERD_BIN"
  local todo=()
  mapfile -t todo < <(stale "$CONTAINERD_BIN" "$CONTAINERD_VERSION" --say "${CONTAINERD_CMDS[@]}")
  if (( ${#todo[@]} == 0 )); then
    unlock_dir; log "containerd $CONTAINERD_VERSION: cached in $CONTAINERD_BIN"; return
  fi
  local t0=$SECONDS w="$CACHE/src/containerd-$CONTAINERD_VERSION" pkg=github.com/containerd/containerd/v2
  mkdir -p "$w"
  cd "$w"
  log "containerd $CONTAINERD_VERSION: preparing wrapper module in $w"
  [[ -f go.mod ]] || "$GO" mod init kubegpu.local/rig-containerd >/dev/null 2>&1
  "$GO" mod edit -go=1.24 -require="$pkg@$CONTAINERD_VERSION"
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
GO
  log "containerd $CONTAINERD_VERSION: go mod tidy"
  with_progress "containerd $CONTAINERD_VERSION: go mod tidy" nice -n "$NICE" "$GO" mod tidy \
    || die "containerd $CONTAINERD_VERSION: go mod tidy failed (output above)"
  local ldf="-s -w -X $pkg/version.Version=$CONTAINERD_VERSION -X $pkg/version.Revision=module"
  local tags="urfave_cli_no_docs,no_btrfs,no_devmapper,no_zfs" c
  for c in "${todo[@]}"; do
    build_one "containerd $CONTAINERD_VERSION: $c" "$CONTAINERD_BIN/$c" "$CONTAINERD_VERSION" \
      -trimpath -tags "$tags$([[ $c == containerd-shim-runc-v2 ]] && echo ,no_grpc)" -ldflags "$ldf" "$pkg/cmd/$c"
  done
  unlock_dir
  log "containerd $CONTAINERD_VERSION: ${#todo[@]} binaries built in $((SECONDS - t0)) s"
}

# kwok (fake nodes for the trace replay, docs/testing.md "kwok"): upstream's own module, so a plain
# `go install pkg@version` resolves it with upstream's go.sum (no wrapper module needed). GOBIN points at
# a temporary directory beside the final one; the binary is checked and renamed into place.
build_kwok() {
  [[ -n "$(stale "$KWOK_BIN" "$KWOK_VERSION" --quiet kwok)" ]] \
    || { log "kwok $KWOK_VERSION: cached in $KWOK_BIN"; return; }
  lock_dir "$KWOK_BIN"
  if [[ -z "$(stale "$KWOK_BIN" "$KWOK_VERSION" --say kwok)" ]]; then
    unlock_dir; log "kwok $KWOK_VERSION: cached in $KWOK_BIN"; return
  fi
  local t0=$SECONDS tmp="$KWOK_BIN.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp" "$KWOK_BIN"
  log "kwok $KWOK_VERSION: go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  with_progress "kwok $KWOK_VERSION" env GOBIN="$tmp" nice -n "$NICE" "$GO" install \
    -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" \
    || { rm -rf "$tmp"; die "kwok $KWOK_VERSION: go install exited non-zero (output above)"; }
  version_ok "$tmp/kwok" "$KWOK_VERSION" kwok \
    || { local got; got="$(reported_version "$tmp/kwok" kwok)"; rm -rf "$tmp"
         die "kwok $KWOK_VERSION: the built binary does not run or reports '${got:-nothing}' instead of $KWOK_VERSION"; }
  mv -f "$tmp/kwok" "$KWOK_BIN/kwok"
  rm -rf "$tmp"
  unlock_dir
  log "kwok $KWOK_VERSION: built in $((SECONDS - t0)) s"
}

# Every binary runs and reports its version, or the build has not finished.
verify_all() {
  local bad
  bad="$(stale "$ETCD_BIN" "$ETCD_VERSION" --quiet etcd | sed "s|^|$ETCD_BIN/|")"
  bad+="$(stale "$CONTAINERD_BIN" "$CONTAINERD_VERSION" --quiet "${CONTAINERD_CMDS[@]}" | sed "s|^|$CONTAINERD_BIN/|")"
  bad+="$(stale "$K8S_BIN" "$K8S_VERSION" --quiet "${K8S_CMDS[@]}" | sed "s|^|$K8S_BIN/|")"
  bad+="$(stale "$KWOK_BIN" "$KWOK_VERSION" --quiet kwok | sed "s|^|$KWOK_BIN/|")"
  [[ -z "$bad" ]] || die "$(echo "$bad" | head -1) is missing or does not run"
  log "verified: etcd $ETCD_VERSION, ${CONTAINERD_CMDS[*]} $CONTAINERD_VERSION, ${K8S_CMDS[*]} $K8S_VERSION and kwok $KWOK_VERSION run and report their versions"
}

# Take the lock of one output directory (fd 9) before building into it; unlock_dir releases it.
lock_dir() { lock_wait "$CACHE/.build-$(basename "$1").lock" "rig build"; }
unlock_dir() { unlock; }

case "${1:-all}" in
  all | etcd | k8s | containerd | kwok) ;;
  print-bin) echo "$K8S_BIN $ETCD_BIN $CONTAINERD_BIN $KWOK_BIN"; exit 0 ;;
  *) echo "usage: $0 [all|etcd|k8s|containerd|kwok|print-bin]" >&2; exit 2 ;;
esac
[[ -x "$GO" ]] || die "no Go toolchain (looked for 'go' on PATH and at $GO); install Go >= 1.26 or set GO"
T0=$SECONDS
case "${1:-all}" in
  all) build_etcd; build_containerd; build_k8s; build_kwok; verify_all ;;
  etcd) build_etcd ;;
  k8s) build_k8s ;;
  containerd) build_containerd ;;
  kwok) build_kwok ;;
esac
log "rig build finished in $((SECONDS - T0)) s (kubernetes $K8S_VERSION, etcd $ETCD_VERSION, containerd $CONTAINERD_VERSION, kwok $KWOK_VERSION)"
