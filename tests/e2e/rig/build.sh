#!/usr/bin/env bash
# Build the rig's Kubernetes and etcd binaries from Go modules, cached by version.
#
# Why: there is no Docker engine and no release tarball download here; the Go module proxy is reachable,
# so kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl and etcd are compiled from
# source through small wrapper modules (k8s.io/kubernetes needs staging `replace` directives; etcd's
# server module is `package main` with local replaces, so `go install` refuses it).
#
# Output: $KUBEGPU_RIG_CACHE/bin/k8s-<ver>/{kube-apiserver,...,kubectl} and bin/etcd-<ver>/etcd.
# A warm run (all binaries present) returns at once. Prints the elapsed build time.
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

K8S_BIN="$CACHE/bin/k8s-$K8S_VERSION"
ETCD_BIN="$CACHE/bin/etcd-$ETCD_VERSION"
K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

log() { printf '[rig-build %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

k8s_complete() {
  local c
  for c in "${K8S_CMDS[@]}"; do [[ -x "$K8S_BIN/$c" ]] || return 1; done
}

build_k8s() {
  if k8s_complete; then log "kubernetes $K8S_VERSION: cached in $K8S_BIN"; return; fi
  local t0=$SECONDS minor patch w="$CACHE/src/k8s-$K8S_VERSION"
  minor="$(echo "$K8S_VERSION" | cut -d. -f2)"; patch="$(echo "$K8S_VERSION" | cut -d. -f3)"
  mkdir -p "$w" "$K8S_BIN.tmp"
  cd "$w"
  log "kubernetes $K8S_VERSION: preparing wrapper module in $w"
  [[ -f go.mod ]] || "$GO" mod init kubegpu.local/rig-k8s >/dev/null 2>&1
  "$GO" mod edit -go=1.24 -require="k8s.io/kubernetes@$K8S_VERSION"
  local upstream_mod
  upstream_mod="$("$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -f "$upstream_mod" ]] || { log "cannot find go.mod of k8s.io/kubernetes@$K8S_VERSION"; exit 1; }
  # Every staging module is required at v0.0.0 upstream; pin each to v0.<minor>.<patch>.
  local m
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
  nice -n "$NICE" "$GO" mod tidy
  local vpkg ldf date
  date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  ldf="-s -w"
  for vpkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf+=" -X $vpkg.gitVersion=$K8S_VERSION -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor"
    ldf+=" -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=$date"
  done
  local c
  for c in "${K8S_CMDS[@]}"; do
    [[ -x "$K8S_BIN.tmp/$c" ]] && continue
    local t1=$SECONDS
    log "kubernetes $K8S_VERSION: building $c"
    nice -n "$NICE" "$GO" build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ldf" \
      -o "$K8S_BIN.tmp/$c" "k8s.io/kubernetes/cmd/$c"
    log "kubernetes $K8S_VERSION: $c built in $((SECONDS - t1)) s"
  done
  rm -rf "$K8S_BIN"; mv "$K8S_BIN.tmp" "$K8S_BIN"
  log "kubernetes $K8S_VERSION: all built in $((SECONDS - t0)) s"
}

build_etcd() {
  if [[ -x "$ETCD_BIN/etcd" ]]; then log "etcd $ETCD_VERSION: cached in $ETCD_BIN"; return; fi
  local t0=$SECONDS w="$CACHE/src/etcd-$ETCD_VERSION"
  mkdir -p "$w" "$ETCD_BIN.tmp"
  cd "$w"
  [[ -f go.mod ]] || "$GO" mod init kubegpu.local/rig-etcd >/dev/null 2>&1
  "$GO" mod edit -go=1.24 -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  log "etcd $ETCD_VERSION: go mod tidy"
  nice -n "$NICE" "$GO" mod tidy
  log "etcd $ETCD_VERSION: building"
  nice -n "$NICE" "$GO" build -trimpath -ldflags "-s -w" -o "$ETCD_BIN.tmp/etcd" go.etcd.io/etcd/server/v3
  rm -rf "$ETCD_BIN"; mv "$ETCD_BIN.tmp" "$ETCD_BIN"
  log "etcd $ETCD_VERSION: built in $((SECONDS - t0)) s"
}

T0=$SECONDS
case "${1:-all}" in
  all) build_etcd; build_k8s ;;
  etcd) build_etcd ;;
  k8s) build_k8s ;;
  print-bin) echo "$K8S_BIN $ETCD_BIN"; exit 0 ;;
  *) echo "usage: $0 [all|etcd|k8s|print-bin]" >&2; exit 2 ;;
esac
log "rig build finished in $((SECONDS - T0)) s (kubernetes $K8S_VERSION, etcd $ETCD_VERSION)"
