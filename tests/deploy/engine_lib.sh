# tests/deploy/engine_lib.sh: what the real-engine tests share (sourced by
# test_compose_engine.sh and test_systemd_engine.sh).
#
# Debian 12 root trees made with debootstrap are cached as tarballs in
# $PL_ENGINE_CACHE (default /var/cache/pipelearn-engines), named by a hash
# of what they hold, so CI makes each once per machine and package list.
# TAP helpers as in the other deploy tests.

n=0
failed=0
ok()      { n=$((n + 1)); echo "ok $n - $*"; }
not_ok()  { n=$((n + 1)); failed=1; echo "not ok $n - $*"; }
diag()    { sed 's/^/# /'; }
check()   { local what=$1; shift; if "$@"; then ok "$what"; else not_ok "$what"; fi; }
# bail REASON: the engine cannot run here; the test fails (never skips) and
# says why.
bail()    { not_ok "$*"; echo "1..$n"; exit 1; }
log()     { echo "# $(date -u +%H:%M:%S) $*"; }

engine_cache="${PL_ENGINE_CACHE:-/var/cache/pipelearn-engines}"

# seconds_until LIMIT CMD...: run CMD every 0.2 s until it succeeds; print
# the seconds that took (one decimal), or nothing (status 1) after LIMIT.
seconds_until() {
    local limit=$1 t0 i
    shift
    t0=$(date +%s.%N)
    for ((i = 0; i < limit * 5; i++)); do
        if "$@"; then
            awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'
            return 0
        fi
        sleep 0.2
    done
    return 1
}

# The mirror the host's apt uses (deb822 sources or a sources.list line).
host_mirror() {
    local m
    m="$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
         grep -v security | head -n1)"
    [ -n "$m" ] || m="$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' \
                         /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null)"
    echo "${m:-http://deb.debian.org/debian}"
}

# need_packages PKG...: install the Debian packages that are missing.
need_packages() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" \
        > "$tmp/apt.log" 2>&1 || { diag < "$tmp/apt.log"; return 1; }
}

# debian_tarball VARIANT INCLUDE: the path of a cached tarball of a Debian
# 12 tree (debootstrap --variant=VARIANT --include=INCLUDE), made if absent.
# The host's apt sources and settings are copied in, so apt-get works in it.
debian_tarball() {
    local variant=$1 include=$2 key tree out
    key="$(printf '%s %s %s' "$variant" "$include" "$(host_mirror)" | sha256sum | cut -c1-12)"
    out="$engine_cache/debian12-$variant-$key.tar"
    if [ -s "$out" ]; then
        echo "$out"
        return 0
    fi
    mkdir -p "$engine_cache"
    tree="$(mktemp -d "$engine_cache/tree.XXXXXX")"
    log "debootstrap --variant=$variant${include:+ --include=$include} bookworm (cached as $out)" >&2
    if ! debootstrap --variant="$variant" ${include:+--include="$include"} bookworm "$tree" \
            "$(host_mirror)" > "$tree.log" 2>&1; then
        tail -n 20 "$tree.log" | diag >&2
        rm -rf "$tree" "$tree.log"
        return 1
    fi
    cp /etc/apt/sources.list.d/* "$tree/etc/apt/sources.list.d/" 2>/dev/null
    [ -f /etc/apt/sources.list ] && cp /etc/apt/sources.list "$tree/etc/apt/"
    cp /etc/apt/apt.conf.d/* "$tree/etc/apt/apt.conf.d/" 2>/dev/null
    rm -rf "$tree/var/lib/apt/lists/"* "$tree/var/cache/apt/archives/"*.deb
    # mktemp made it 0700; as the tree's / that locks out every other user
    # (seen: dbus-daemon and DynamicUser services failed in the booted tree).
    chmod 755 "$tree"
    tar -C "$tree" -cf "$out.part" . && mv "$out.part" "$out"
    rm -rf "$tree" "$tree.log"
    [ -s "$out" ] && echo "$out"
}
