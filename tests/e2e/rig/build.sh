#!/usr/bin/env bash
# Build the rig's Kubernetes and etcd binaries from Go modules, cached by version.
#
# Why: there is no Docker engine and no release tarball download here; the Go module proxy is reachable,
# so kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl and etcd are compiled from
# source through small wrapper modules (k8s.io/kubernetes needs staging `replace` directives; etcd's
# server module is `package main` with local replaces, so `go install` refuses it).
#
# Output: $KUBEGPU_RIG_CACHE/bin/k8s-<ver>/{kube-apiserver,...,kubectl} and bin/etcd-<ver>/etcd.
#
# Safe to run twice at once on one cache: a lock ($CACHE/.build.lock) serialises builds, and the second
# one finds the first one's binaries. Each binary is built under a temporary name and renamed into place
# (atomic), so a binary at its final path is always whole. Before saying "finished", every binary is run
# once (`--version`) and must report the expected version; a cached binary that fails this is rebuilt,
# and one that fails after its build stops the build with one line naming it. A warm run returns at once.
# Long `go build` steps print a progress line at least every 30 s.
set -euo pipefail

# Go needs a home for its module and build caches; CI may run with a bare environment.
if [ -z "${HOME:-}" ]; then
  HOME="$(getent passwd "$(id -u)" | cut -d: -f6)"
  export HOME
fi

K8S_VERSION="${KUBEGPU_RIG_K8S_VERSION:-v1.34.4}"
ETCD_VERSION="${KUBEGPU_RIG_ETCD_VERSION:-v3.6.16}"
CACHE="${KUBEGPU_RIG_CACHE:-$HOME/.cache/kubegpu-rig}"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
# Low priority and one package at a time by default (the build machine is shared); set
# KUBEGPU_RIG_GOFLAGS=-p=2 (or empty) on a dedicated CI runner for a faster cold build.
export GOFLAGS="${GOFLAGS:-} ${KUBEGPU_RIG_GOFLAGS--p=1} -buildvcs=false"
export CGO_ENABLED=0
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
NICE="${KUBEGPU_RIG_NICE:-15}"
PROGRESS_S="${KUBEGPU_RIG_PROGRESS_S:-30}"

K8S_BIN="$CACHE/bin/k8s-$K8S_VERSION"
ETCD_BIN="$CACHE/bin/etcd-$ETCD_VERSION"
K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

log() { printf '[rig-build %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

# The version a binary reports, or nothing when it cannot run. $2: which program it is (default: its name).
reported_version() {
  local bin=$1 name=${2:-$(basename "$1")}
  [[ -x "$bin" ]] || return 0
  case "$name" in
    kubectl) timeout 20 "$bin" version --client 2>/dev/null | sed -n 's/^Client Version: //p' | head -1 ;;
    etcd) timeout 20 "$bin" --version 2>/dev/null | sed -n 's/^etcd Version: //p' | head -1 ;;
    *) timeout 20 "$bin" --version 2>/dev/null | sed -n 's/^Kubernetes //p' | head -1 ;;
  esac || true
}

# True when binary $1 (program $3, default its name) runs and reports version $2 (etcd omits the v).
version_ok() {
  local got
  got="$(reported_version "$1" "${3:-}")"
  [[ -n "$got" && ( "$got" == "$2" || "v$got" == "$2" ) ]]
}

# Run a long command in the background, printing a progress line every $PROGRESS_S seconds.
CHILD=""
trap '[[ -n "$CHILD" ]] && kill "$CHILD" 2>/dev/null; exit 130' INT TERM
with_progress() {
  local what=$1; shift
  local t0=$SECONDS next=$PROGRESS_S rc=0
  "$@" &
  local pid=$!
  CHILD=$pid
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.2
    if (( SECONDS - t0 >= next )); then
      log "$what: still running ($((SECONDS - t0)) s)"
      next=$((next + PROGRESS_S))
    fi
  done
  wait "$pid" || rc=$?
  CHILD=""
  return "$rc"
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

build_k8s() {
  local c todo=()
  for c in "${K8S_CMDS[@]}"; do
    if version_ok "$K8S_BIN/$c" "$K8S_VERSION"; then continue; fi
    [[ -e "$K8S_BIN/$c" ]] && log "kubernetes $K8S_VERSION: cached $c does not run or has another version; rebuilding it"
    todo+=("$c")
  done
  if (( ${#todo[@]} == 0 )); then log "kubernetes $K8S_VERSION: cached in $K8S_BIN"; return; fi
  local t0=$SECONDS minor w="$CACHE/src/k8s-$K8S_VERSION"
  minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
  prepare_k8s_module "$w" "$minor"
  local vpkg ldf date
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
  log "kubernetes $K8S_VERSION: ${#todo[@]} binaries built in $((SECONDS - t0)) s"
}

build_etcd() {
  if version_ok "$ETCD_BIN/etcd" "$ETCD_VERSION"; then log "etcd $ETCD_VERSION: cached in $ETCD_BIN"; return; fi
  [[ -e "$ETCD_BIN/etcd" ]] && log "etcd $ETCD_VERSION: cached etcd does not run or has another version; rebuilding it"
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
  log "etcd $ETCD_VERSION: tidy and build took $((SECONDS - t0)) s"
}

# Every binary runs and reports its version, or the build has not finished.
verify_all() {
  local c
  version_ok "$ETCD_BIN/etcd" "$ETCD_VERSION" || die "$ETCD_BIN/etcd is missing or does not run"
  for c in "${K8S_CMDS[@]}"; do
    version_ok "$K8S_BIN/$c" "$K8S_VERSION" || die "$K8S_BIN/$c is missing or does not run"
  done
  log "verified: etcd $ETCD_VERSION and ${K8S_CMDS[*]} $K8S_VERSION run and report their versions"
}

lock_cache() {
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.build.lock"
  if ! flock -n 9; then
    log "another rig build holds $CACHE/.build.lock; waiting for it"
    flock 9
    log "the other build finished; checking what it left"
  fi
}

case "${1:-all}" in
  all | etcd | k8s) ;;
  print-bin) echo "$K8S_BIN $ETCD_BIN"; exit 0 ;;
  *) echo "usage: $0 [all|etcd|k8s|print-bin]" >&2; exit 2 ;;
esac
[[ -x "$GO" ]] || die "no Go toolchain (looked for 'go' on PATH and at $GO); install Go >= 1.24 or set GO"
T0=$SECONDS
lock_cache
case "${1:-all}" in
  all) build_etcd; build_k8s; verify_all ;;
  etcd) build_etcd ;;
  k8s) build_k8s ;;
esac
log "rig build finished in $((SECONDS - T0)) s (kubernetes $K8S_VERSION, etcd $ETCD_VERSION)"
