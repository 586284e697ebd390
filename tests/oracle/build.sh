#!/usr/bin/env bash
# Build NVIDIA's nvidia-device-plugin and gpu-feature-discovery from the Go module proxy into the rig
# cache, for the oracle test (tests/integration/oracle/, issue 56): kubegpu is compared with NVIDIA's
# own binaries running against the C NVML stand-in.
#
# How (no download but the Go module proxy; NVIDIA's source never enters the repository):
# - nvidia-device-plugin is built as is, through a small wrapper module that requires
#   github.com/NVIDIA/k8s-device-plugin@$VERSION and blank-imports its cmd package (the way
#   tests/e2e/rig/build.sh and deploy/tools/build-helm.sh build Kubernetes and helm).
# - gpu-feature-discovery imports sigs.k8s.io/node-feature-discovery v0.15.7, which the proxy does not
#   serve (403). The build copies the module's source out of the module cache into
#   $CACHE/src/nvidia-gfd-$VERSION and moves that import to v0.17.3: two import paths (the NFD API types
#   and the generated clientset moved to api/), used only by GFD's NodeFeature API output, which the
#   oracle does not use (it runs GFD with --oneshot --output-file). Nothing else changes.
# - cgo is on: go-nvml dlopen()s libnvidia-ml.so.1, which is how the stand-in gets in.
#
# Output: $KUBEGPU_RIG_CACHE/bin/nvidia-device-plugin-$VERSION/{nvidia-device-plugin,gpu-feature-discovery}
# (default cache ~/.cache/kubegpu-rig). Prints that directory on success; one "FAILED:" line on failure.
# `build.sh print-bin` prints the directory without building.
#
# Idempotent and cached: each binary is built under a temporary name, run once (`--version` must report
# $VERSION) and renamed into place; a cached binary that runs and reports $VERSION is kept, so a warm
# run returns at once. A lock ($CACHE/.build-nvidia-device-plugin-$VERSION.lock) serialises two builds.
# Niced (KUBEGPU_RIG_NICE, default 15) like the rig's builds; KUBEGPU_RIG_GOFLAGS adds Go flags (-p=1).
set -euo pipefail

LOG_TAG=oracle-build
# shellcheck source=../../deploy/tools/gobuild.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../deploy/tools/gobuild.sh"

VERSION="${KUBEGPU_NVIDIA_DP_VERSION:-v0.17.4}"
NFD_VERSION="${KUBEGPU_NVIDIA_NFD_VERSION:-v0.17.3}"
MODULE=github.com/NVIDIA/k8s-device-plugin
BIN="$CACHE/bin/nvidia-device-plugin-$VERSION"
CMDS=(nvidia-device-plugin gpu-feature-discovery)
LDFLAGS="-s -w -X $MODULE/internal/info.version=$VERSION"
# go-nvml loads libnvidia-ml.so.1 with dlopen through cgo.
export CGO_ENABLED=1

case "${1:-all}" in
  all) ;;
  print-bin) echo "$BIN"; exit 0 ;;
  *) echo "usage: $0 [all|print-bin]" >&2; exit 2 ;;
esac

# The version binary $1 reports (first line of --version's output after "version "), or nothing.
reported_version() {
  [[ -x "$1" ]] || return 0
  timeout 20 "$1" --version 2>/dev/null | sed -n 's/^.* version //p' | head -1 || true
}
version_ok() { [[ "$(reported_version "$1")" == "$VERSION" ]]; }

all_ok() {
  local c
  for c in "${CMDS[@]}"; do version_ok "$BIN/$c" || return 1; done
}

# Compile package $3 in the current module to $BIN/$1 (temporary name, check, rename). $2 names it.
build_one() {
  local name=$1 what=$2 pkg=$3 tmp="$BIN/$1.tmp.$$"
  local t1=$SECONDS
  rm -f "$tmp"
  log "$what: go build"
  with_progress "$what: go build" nice -n "$NICE" "$GO" build -o "$tmp" -trimpath -ldflags "$LDFLAGS" "$pkg" \
    || { rm -f "$tmp"; die "$what: go build exited non-zero (output above)"; }
  version_ok "$tmp" \
    || { local got; got="$(reported_version "$tmp")"; rm -f "$tmp"
         die "$what: the built binary does not run or reports '${got:-nothing}' instead of $VERSION"; }
  mv -f "$tmp" "$BIN/$name"
  log "$what: built in $((SECONDS - t1)) s"
}

build_plugin() {
  local w="$CACHE/src/nvidia-device-plugin-$VERSION"
  mkdir -p "$w"
  cd "$w"
  [[ -f go.mod ]] || "$GO" mod init kubegpu.local/oracle-nvidia-device-plugin >/dev/null 2>&1
  "$GO" mod edit -go=1.24 -require="$MODULE@$VERSION"
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "github.com/NVIDIA/k8s-device-plugin/cmd/nvidia-device-plugin"
GO
  log "nvidia-device-plugin $VERSION: go mod tidy"
  with_progress "nvidia-device-plugin $VERSION: go mod tidy" nice -n "$NICE" "$GO" mod tidy \
    || die "nvidia-device-plugin $VERSION: go mod tidy failed (output above; Go module proxy reachable?)"
  build_one nvidia-device-plugin "nvidia-device-plugin $VERSION" "$MODULE/cmd/nvidia-device-plugin"
}

build_gfd() {
  local src w="$CACHE/src/nvidia-gfd-$VERSION"
  src="$("$GO" mod download -json "$MODULE@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -n "$src" && -f "$src/go.mod" ]] \
    || die "gpu-feature-discovery $VERSION: cannot download $MODULE@$VERSION (Go module proxy reachable?)"
  # A fresh copy each time: the patch below is applied to NVIDIA's text, never to an earlier result.
  rm -rf "$w"
  mkdir -p "$(dirname "$w")"
  cp -r "$src" "$w"
  chmod -R u+w "$w"
  cd "$w"
  # The module zip keeps vendor/modules.txt without the vendored code; without this Go would insist on
  # -mod=vendor.
  rm -rf vendor
  log "gpu-feature-discovery $VERSION: moving sigs.k8s.io/node-feature-discovery to $NFD_VERSION"
  local f files
  files="$(grep -rl --include='*.go' 'sigs.k8s.io/node-feature-discovery/pkg/' . || true)"
  [[ -n "$files" ]] || die "gpu-feature-discovery $VERSION: no node-feature-discovery import found to move (another layout?)"
  for f in $files; do
    sed -i \
      -e 's|"sigs.k8s.io/node-feature-discovery/pkg/apis/nfd/v1alpha1"|"sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"|' \
      -e 's|"sigs.k8s.io/node-feature-discovery/pkg/generated/clientset/versioned"|"sigs.k8s.io/node-feature-discovery/api/generated/clientset/versioned"|' \
      "$f"
  done
  if grep -rn --include='*.go' '"sigs.k8s.io/node-feature-discovery/pkg/' . >&2; then
    die "gpu-feature-discovery $VERSION: node-feature-discovery imports left that the patch does not know (above)"
  fi
  "$GO" mod edit -require="sigs.k8s.io/node-feature-discovery@$NFD_VERSION" \
    -require="sigs.k8s.io/node-feature-discovery/api/nfd@$NFD_VERSION"
  log "gpu-feature-discovery $VERSION: go mod tidy"
  # -e: the module's tests import packages of NFD that moved too; tidy must not fail on them.
  with_progress "gpu-feature-discovery $VERSION: go mod tidy" nice -n "$NICE" "$GO" mod tidy -e \
    || die "gpu-feature-discovery $VERSION: go mod tidy failed (output above; Go module proxy reachable?)"
  build_one gpu-feature-discovery "gpu-feature-discovery $VERSION" ./cmd/gpu-feature-discovery
}

[[ -x "$GO" ]] || die "no Go toolchain (looked for 'go' on PATH and at $GO)"
command -v "${CC:-gcc}" >/dev/null || die "no C compiler (${CC:-gcc}); go-nvml needs cgo"
if all_ok; then
  log "nvidia-device-plugin and gpu-feature-discovery $VERSION: cached in $BIN"
  echo "$BIN"
  exit 0
fi
lock_wait "$CACHE/.build-nvidia-device-plugin-$VERSION.lock" "oracle build"
mkdir -p "$BIN"
T0=$SECONDS
version_ok "$BIN/nvidia-device-plugin" || build_plugin
version_ok "$BIN/gpu-feature-discovery" || build_gfd
all_ok || die "$BIN: a binary is missing or does not report $VERSION after the build"
unlock
log "nvidia-device-plugin and gpu-feature-discovery $VERSION: built in $((SECONDS - T0)) s"
echo "$BIN"
