#!/usr/bin/env bash
# Build `helm` from Go modules into the rig cache, the way tests/e2e/rig/build.sh builds Kubernetes.
#
# Why: there is no release download here; the Go module proxy is reachable. helm's go.mod may carry
# replace directives, which `go install …@version` refuses, so it is built through a small wrapper module
# that requires helm.sh/helm/v3 and blank-imports helm.sh/helm/v3/cmd/helm.
#
# Output: $KUBEGPU_RIG_CACHE/bin/helm-<ver>/helm (default cache ~/.cache/kubegpu-rig). Prints its path.
#
# Safe to run twice at once: a lock ($CACHE/.helm-build.lock) serialises builds and the second one finds
# the first one's binary. The binary is built under a temporary name, checked (`helm version` must report
# the expected version) and renamed into place, so a binary at its final path is always whole and
# verified; a cached one that does not run or reports another version is rebuilt. A warm run returns at once.
set -euo pipefail

LOG_TAG=helm-build
# shellcheck source=gobuild.sh
source "$(dirname "${BASH_SOURCE[0]}")/gobuild.sh"

HELM_VERSION="${KUBEGPU_HELM_VERSION:-v3.22.0}"
OUT="$CACHE/bin/helm-$HELM_VERSION/helm"

reported_version() {
  [[ -x "$1" ]] || return 0
  timeout 20 "$1" version --template '{{.Version}}' 2>/dev/null || true
}
version_ok() { [[ "$(reported_version "$1")" == "$HELM_VERSION" ]]; }

[[ -x "$GO" ]] || die "no Go toolchain (looked for 'go' on PATH and at $GO)"
lock_wait "$CACHE/.helm-build.lock" "helm build"
if version_ok "$OUT"; then
  log "helm $HELM_VERSION: cached"
  echo "$OUT"
  exit 0
fi
[[ -e "$OUT" ]] && log "cached helm does not run or reports another version; rebuilding it"
T0=$SECONDS
W="$CACHE/src/helm-$HELM_VERSION"
mkdir -p "$W" "$(dirname "$OUT")"
cd "$W"
[[ -f go.mod ]] || "$GO" mod init kubegpu.local/rig-helm >/dev/null 2>&1
"$GO" mod edit -go=1.24 -require="helm.sh/helm/v3@$HELM_VERSION"
cat > tools.go <<'GO'
//go:build tools

package tools

import _ "helm.sh/helm/v3/cmd/helm"
GO
log "helm $HELM_VERSION: go mod tidy"
with_progress "helm $HELM_VERSION: go mod tidy" nice -n "$NICE" "$GO" mod tidy \
  || die "go mod tidy failed (output above; Go module proxy reachable?)"
TMP="$OUT.tmp.$$"
trap 'rm -f "$TMP"' EXIT
log "helm $HELM_VERSION: go build"
with_progress "helm $HELM_VERSION: go build" nice -n "$NICE" "$GO" build -o "$TMP" -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
  helm.sh/helm/v3/cmd/helm || die "go build exited non-zero (output above)"
version_ok "$TMP" || die "the built helm reports '$(reported_version "$TMP")' instead of $HELM_VERSION"
mv -f "$TMP" "$OUT"
log "helm $HELM_VERSION: built and verified in $((SECONDS - T0)) s"
echo "$OUT"
