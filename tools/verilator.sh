#!/usr/bin/env bash
# Make a Verilator that cocotb 2.x accepts (>= 5.036) available and print its bin directory.
#
# Order of preference:
#   1. a `verilator` on PATH that is new enough;
#   2. a build cached in the per-user cache directory (outside the repository);
#   3. a fresh build of the pinned version, optimized binary only:
#      - on Debian, from the distribution's source package (unstable suite), fetched through the
#        mirror already configured in the system's apt sources;
#      - elsewhere, from the upstream git tag.
#
# All progress goes to stderr; the last line on stdout is the directory holding `verilator`.
# Idempotent: a second call returns at once. Calls at the same time (parallel `make` targets,
# several checkouts) take turns on a lock in the cache directory: one builds, the others then
# find its build (a build is used only once its `.complete` stamp exists).
set -euo pipefail

PIN="${ROCEGEN_VERILATOR_VERSION:-5.048}"
MIN="5.036"
CACHE_ROOT="${ROCEGEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rocegen}"
PREFIX="$CACHE_ROOT/verilator-$PIN"
UPSTREAM_GIT="${ROCEGEN_VERILATOR_GIT:-https://github.com/verilator/verilator.git}"

log() { printf '[verilator] %s\n' "$*" >&2; }

version_of() {  # prints "5.048" for a verilator executable, or nothing
    "$1" --version 2>/dev/null | sed -n 's/^Verilator \([0-9]*\.[0-9]*\).*/\1/p' | head -n1
}

new_enough() {  # $1 >= MIN ?
    [ -n "$1" ] && [ "$(printf '%s\n%s\n' "$MIN" "$1" | sort -V | head -n1)" = "$MIN" ]
}

# One call at a time per cache directory (flock(1), util-linux); the lock goes with the process.
mkdir -p "$CACHE_ROOT"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$CACHE_ROOT/.verilator.lock"
    if ! flock -n 9; then
        log "another call is finding or building verilator in $CACHE_ROOT: waiting for it"
        flock 9
    fi
else
    log "flock not found: calls at the same time are not serialised"
fi

# Verilator's generated makefiles use ccache when it is installed; make sure it is.
if ! command -v ccache >/dev/null 2>&1 && [ -f /etc/debian_version ] && command -v apt-get >/dev/null 2>&1 \
        && { [ "$(id -u)" = 0 ] || command -v sudo >/dev/null 2>&1; }; then
    log "installing ccache"
    if [ "$(id -u)" = 0 ]; then sudo_=""; else sudo_=sudo; fi
    $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ccache >&2 \
        || { $sudo_ apt-get update -qq >&2 && $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ccache >&2; } \
        || log "ccache not installed; Verilator builds will not be cached"
fi

# 1. PATH
if command -v verilator >/dev/null 2>&1; then
    v=$(version_of "$(command -v verilator)")
    if new_enough "$v"; then
        log "using verilator $v from PATH"
        dirname "$(command -v verilator)"
        exit 0
    fi
    log "verilator on PATH is $v, older than $MIN: not used"
fi

# 2. cache
if [ -f "$PREFIX/.complete" ] && new_enough "$(version_of "$PREFIX/bin/verilator")"; then
    log "using cached verilator in $PREFIX"
    echo "$PREFIX/bin"
    exit 0
fi

# 3. build
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rocegen-verilator.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
log "building verilator $PIN into $PREFIX (one time, about 6 minutes on 2 cores)"

if [ -f /etc/debian_version ] && command -v apt-get >/dev/null 2>&1; then
    # Reuse the URI of the system's own Debian mirror for a deb-src entry of the unstable suite.
    uri=$(grep -h -E '^\s*URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null \
            | awk '{print $2}' | grep -E '/debian/?$' | head -n1 || true)
    if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
        uri=$(awk '$1=="deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list || true)
    fi
    [ -n "$uri" ] || { log "no Debian mirror found in the apt sources"; exit 1; }
    src=/etc/apt/sources.list.d/rocegen-unstable-src.sources
    if [ ! -f "$src" ]; then
        log "adding a deb-src entry for unstable on $uri"
        printf 'Types: deb-src\nURIs: %s\nSuites: unstable\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            "$uri" | as_root tee "$src" >/dev/null
    fi
    log "apt-get update"
    as_root apt-get update -qq >&2
    log "installing build dependencies"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        dpkg-dev autoconf flex bison help2man libfl-dev zlib1g-dev g++ make perl python3 ccache \
        >&2
    cd "$WORK"
    avail=$(apt-cache showsrc verilator 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -n1)
    want=$(apt-cache showsrc verilator 2>/dev/null | sed -n "s/^Version: \(${PIN}-.*\)/\1/p" | sort -V | tail -n1)
    if [ -n "$want" ]; then
        log "fetching source package verilator $want"
        apt-get source -qq "verilator=$want" >&2
    else
        log "pinned $PIN not in the archive (newest: ${avail:-none}); fetching the newest"
        apt-get source -qq verilator >&2
    fi
    srcdir=$(find "$WORK" -maxdepth 1 -mindepth 1 -type d -name 'verilator-*' | head -n1)
else
    for t in git autoconf flex bison g++ make perl; do
        command -v "$t" >/dev/null || { log "missing tool: $t"; exit 1; }
    done
    log "cloning upstream tag v$PIN"
    git clone --quiet --depth 1 --branch "v$PIN" "$UPSTREAM_GIT" "$WORK/verilator-$PIN" >&2
    srcdir="$WORK/verilator-$PIN"
fi

# Build in place inside the cache directory (Verilator runs from its own tree with
# VERILATOR_ROOT set by its wrapper), optimized binary only.
rm -rf "$PREFIX"
mkdir -p "$CACHE_ROOT"
cp -a "$srcdir" "$PREFIX"
cd "$PREFIX"
log "configure"
autoconf >&2
./configure --quiet >&2
jobs=$(nproc 2>/dev/null || echo 2)
log "compiling verilator_bin with $jobs jobs (progress: one dot per object file)"
make -C src -j"$jobs" opt 2>&1 | awk '/^(g\+\+|ccache|c\+\+).* -c /{printf "." > "/dev/stderr"; fflush("/dev/stderr")} /error/{print > "/dev/stderr"}'
echo >&2
[ -x bin/verilator_bin ] || { log "build failed: bin/verilator_bin missing"; exit 1; }
v=$(version_of "$PREFIX/bin/verilator")
new_enough "$v" || { log "built verilator reports '$v', not >= $MIN"; exit 1; }
touch "$PREFIX/.complete"
log "verilator $v ready in $PREFIX"
echo "$PREFIX/bin"
