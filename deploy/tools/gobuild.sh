# Shared by the two scripts that build Go programs from the module proxy into the rig cache:
# deploy/tools/build-helm.sh (helm) and tests/e2e/rig/build.sh (Kubernetes, etcd, containerd, kwok).
# Sourced, not run. The sourcing script sets LOG_TAG (its log prefix) first.
#
# What it gives: a HOME for Go's caches when CI runs with a bare environment; the Go settings both
# builds use (GOFLAGS without compiler DWARF, CGO off, the local toolchain, nice $KUBEGPU_RIG_NICE);
# CACHE; log/die; with_progress (a long step in the background with a line every $PROGRESS_S seconds);
# lock_wait (take a build lock on fd 9, saying so when another build holds it) and unlock.

if [ -z "${HOME:-}" ]; then
  HOME="$(getent passwd "$(id -u)" | cut -d: -f6)"
  export HOME
fi

log() { printf '[%s %s] %s\n' "${LOG_TAG:-build}" "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

CACHE="${KUBEGPU_RIG_CACHE:-$HOME/.cache/kubegpu-rig}"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
# Low priority (nice 15: `make test` runs these builds beside the unit and integration tests, which keep
# the cores they need), Go's own parallelism (-p = the core count), and no DWARF from the compiler (the
# linker strips it anyway with -s -w; not generating it cuts about a tenth of the compile time).
# KUBEGPU_RIG_GOFLAGS adds flags, e.g. -p=1 on a machine shared with other work.
export GOFLAGS="${GOFLAGS:-} ${KUBEGPU_RIG_GOFLAGS-} -gcflags=all=-dwarf=false -buildvcs=false"
export CGO_ENABLED=0
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
NICE="${KUBEGPU_RIG_NICE:-15}"
PROGRESS_S="${KUBEGPU_RIG_PROGRESS_S:-30}"

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

# Take lock file $1 on fd 9; when another build holds it, say so ($2 names that build) and wait.
lock_wait() {
  mkdir -p "$(dirname "$1")"
  exec 9>"$1"
  if ! flock -n 9; then
    log "another ${2:-build} holds $1; waiting for it"
    flock 9
    log "the other build finished; checking what it left"
  fi
}
unlock() { exec 9>&-; }
