#!/usr/bin/env bash
# tests/deploy/test_compose.sh: the Dockerfile, deploy/compose and the
# container entrypoint, without a Docker engine (TAP).
#
#   1. docker-compose (v1, Debian's) validates docker-compose.yml offline; a
#      broken copy must be refused (the check can fail);
#   2. the compose file's shape: one server, clients with distinct device
#      ids and keys, NET_ADMIN exactly on the clients with a network
#      profile, no container but the shaped ones starts as root;
#   3. every Debian package the Dockerfile installs exists in Debian 12
#      (apt-cache), and the runtime stage has no -dev package;
#   4. pipelearn-entrypoint in dry-run mode prints the exact tc/ip commands
#      for the 4g, 4g-plus and wifi profiles (values from the profile files)
#      and for custom values, refuses bad input, and runs its command;
#   5. pipelearn-compose-keys makes the server and device pairs and the
#      allow-list.
set -uo pipefail

n=0
failed=0
ok()      { n=$((n + 1)); echo "ok $n - $*"; }
not_ok()  { n=$((n + 1)); failed=1; echo "not ok $n - $*"; }
skip()    { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }
diag()    { sed 's/^/# /'; }
check()   { local what=$1; shift; if "$@"; then ok "$what"; else not_ok "$what"; fi; }

src="${PL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
compose="$src/deploy/compose/docker-compose.yml"
entry="$src/deploy/compose/pipelearn-entrypoint"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/pl-deploy-compose.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# --- 1. docker-compose config ----------------------------------------------
if command -v docker-compose >/dev/null; then
    out="$(docker-compose -f "$compose" config -q 2>&1)"
    if [ $? -eq 0 ] && [ -z "$out" ]; then
        ok "docker-compose config -q accepts docker-compose.yml"
    else
        not_ok "docker-compose config -q accepts docker-compose.yml"
        diag <<< "$out"
    fi
    # The same validator must refuse a broken file: a misspelt service key.
    sed 's/^    cap_add:/    cap_addd:/' "$compose" > "$tmp/broken.yml"
    if docker-compose -f "$tmp/broken.yml" config -q >/dev/null 2>&1; then
        not_ok "docker-compose config -q refuses a misspelt key"
    else
        ok "docker-compose config -q refuses a misspelt key"
    fi
    docker-compose -f "$compose" config > "$tmp/resolved.yml" 2>/dev/null
    # Scaling by variable: PIPELEARN_DEVICES reaches the keys and the server.
    PIPELEARN_DEVICES=3 docker-compose -f "$compose" config > "$tmp/three.yml" 2>/dev/null
    check "PIPELEARN_DEVICES=3 reaches keygen and the server's devices" \
        test "$(grep -cE "^ *- '?(3|devices=3)'?$" "$tmp/three.yml")" -eq 2
else
    skip "docker-compose config" "docker-compose not installed (apt-get install docker-compose)"
    cp "$compose" "$tmp/resolved.yml"
fi

# --- 2. the compose file's shape --------------------------------------------
# Read with Debian's python3-yaml when present (docker-compose depends on it).
# shape_problems FILE: one line per problem, then a "# N clients" line.
shape_problems() {
    /usr/bin/python3 - "$1" <<'EOF'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
svc = doc["services"]
problems = []
clients = {k: v for k, v in svc.items() if "pipelearn-client" in v.get("command", [])}
if "server" not in svc or "keygen" not in svc:
    problems.append("want services server and keygen")
if len(clients) < 2:
    problems.append("want at least 2 clients, got %d" % len(clients))
ids, certs = set(), set()
for name, c in clients.items():
    cmd = c["command"]
    ids.add(cmd[cmd.index("--device-id") + 1])
    certs.add(cmd[cmd.index("--cert") + 1])
    shaped = "NETEM_PROFILE" in c.get("environment", {})
    caps = c.get("cap_add", [])
    if shaped != ("NET_ADMIN" in caps):
        problems.append("%s: NET_ADMIN %s but network profile %s" % (name, caps, shaped))
    if shaped != (c.get("user") == "root"):
        problems.append("%s: user %s but network profile %s" % (name, c.get("user"), shaped))
    if "keys:/keys:ro" not in c.get("volumes", []):
        problems.append("%s: keys not mounted read-only" % name)
    # A shaped client starts only after its profile was checked in a
    # one-shot container with the same profile (docs/deploy.md).
    if shaped:
        check = name + "-netcheck"
        dep = c.get("depends_on", {}).get(check, {})
        if dep.get("condition") != "service_completed_successfully":
            problems.append("%s: does not wait for %s to complete" % (name, check))
        chk = svc.get(check, {})
        if chk.get("command") != ["--check"] or \
           chk.get("environment", {}).get("NETEM_PROFILE") != c["environment"]["NETEM_PROFILE"]:
            problems.append("%s: no %s checking the same profile" % (name, check))
        if "/dev/net/tun" not in c.get("devices", []):
            problems.append("%s: shaped without /dev/net/tun (relay back-end)" % name)
        if check not in svc.get("server", {}).get("depends_on", {}):
            problems.append("server: does not wait for %s" % check)
if len(ids) != len(clients) or len(certs) != len(clients):
    problems.append("clients share a device id or a key: %s %s" % (ids, certs))
for name in ("server", "keygen"):
    if svc.get(name, {}).get("cap_add") or svc.get(name, {}).get("user") == "root":
        problems.append("%s: must run unprivileged" % name)
if "results:/results" not in svc.get("server", {}).get("volumes", []):
    problems.append("server: no results volume")
for p in problems:
    print(p)
print("# %d clients, %d shaped" % (len(clients), sum("NETEM_PROFILE" in c.get("environment", {}) for c in clients.values())))
EOF
}
if /usr/bin/python3 -c 'import yaml' 2>/dev/null; then
    out="$(shape_problems "$compose")"
    if grep -qv '^#' <<< "$out"; then
        not_ok "compose file: server, keygen, distinct clients, NET_ADMIN only where shaped"
        diag <<< "$out"
    else
        ok "compose file: server, keygen, distinct clients, NET_ADMIN only where shaped"
        echo "$out"
    fi
    # The check must catch a client given NET_ADMIN without a profile.
    awk '/^  client1:/ { print; print "    cap_add: [NET_ADMIN]"; next } { print }' "$compose" \
        > "$tmp/caps.yml"
    check "compose shape check catches NET_ADMIN on an unshaped client" \
        grep -q "client1: NET_ADMIN" <<< "$(shape_problems "$tmp/caps.yml")"
else
    skip "compose file shape" "python3-yaml not installed"
fi

# --- 3. the Dockerfile's packages -------------------------------------------
# apt-get lines' package words: from "install ... \" continuation lines up to
# the first line that does not end in a backslash; options and $(...) out.
pkgs_of_stage() {
    awk -v stage="$1" '
        /^FROM / { s++ }
        s == stage && /apt-get install/ { on = 1 }
        on { print; if ($0 !~ /\\$/) on = 0 }
    ' "$src/Dockerfile" | sed -e 's/.*apt-get install//' -e 's/\$(.*)//' -e 's/&&.*//' \
        | tr ' \\' '\n\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' | grep -v '^-'
    # The optional dataset package of the runtime stage.
    if [ "$1" = 2 ]; then
        grep -oE 'echo [a-z0-9-]+; fi' "$src/Dockerfile" | awk '{print $2}' | tr -d ';'
    fi
}
build_pkgs="$(pkgs_of_stage 1 | sort -u)"
run_pkgs="$(pkgs_of_stage 2 | sort -u)"
echo "# build stage: $(echo $build_pkgs)"
echo "# runtime stage: $(echo $run_pkgs)"
check "Dockerfile: packages found in both stages" test -n "$build_pkgs" -a -n "$run_pkgs"
check "Dockerfile: no -dev package in the runtime stage" bash -c "! grep -q -- '-dev\$' <<< '$run_pkgs'"
for want in libzmq5 libczmq4 libopenblas0 libcjson1 libsodium23 zlib1g libzstd1 libgomp1 dataset-fashion-mnist; do
    grep -qx "$want" <<< "$run_pkgs" || { not_ok "Dockerfile runtime stage installs $want"; }
done
if command -v apt-cache >/dev/null && [ "$(. /etc/os-release 2>/dev/null; echo "${VERSION_ID:-}")" = 12 ]; then
    # One apt-cache call (each takes a second or more): the packages it
    # knows come back as "Package:" lines.
    found="$(apt-cache show --no-all-versions $build_pkgs $run_pkgs 2>/dev/null |
        sed -n 's/^Package: //p' | sort -u)"
    missing=()
    for p in $build_pkgs $run_pkgs; do
        grep -qx "$p" <<< "$found" || missing+=("$p")
    done
    check "Dockerfile: every package exists in Debian 12 (apt-cache show)${missing[*]:+; missing: ${missing[*]}}" \
        test ${#missing[@]} -eq 0
    check "apt-cache show refuses a package that does not exist" \
        bash -c "! apt-cache show --no-all-versions libpipelearn-nonexistent0 >/dev/null 2>&1"
else
    skip "Dockerfile packages exist in Debian 12" "not a Debian 12 host with apt-cache"
fi
# Files the Dockerfile copies from the source tree must exist.
for f in deploy/compose/pipelearn-entrypoint deploy/compose/pipelearn-compose-keys; do
    check "Dockerfile: $f exists and is executable" test -x "$src/$f"
done

# --- 4. the entrypoint's network profile ------------------------------------
profiles="$src/deploy/netem/profiles"
# profile_value NAME KEY
profile_value() { sed -n "s/^$2=//p" "$profiles/$1.conf"; }
burst() { awk -v r="$1" 'BEGIN { b = r * 4; if (b < 32) b = 32; printf "%d", b + 0.999 }'; }
# expected NAME: the commands the profile must give, from its file.
expected() {
    local up down delay jitter loss netem
    up=$(profile_value "$1" uplink_mbit); down=$(profile_value "$1" downlink_mbit)
    delay=$(profile_value "$1" delay_ms); jitter=$(profile_value "$1" jitter_ms)
    loss=$(profile_value "$1" loss_pct)
    netem="delay ${delay}ms"
    [ "$jitter" != 0 ] && netem="$netem ${jitter}ms"
    [ "$loss" != 0 ] && netem="$netem loss ${loss}%"
    cat <<EOF
tc qdisc replace dev eth0 root handle 1: netem $netem
tc qdisc replace dev eth0 parent 1:1 handle 10: tbf rate ${up}mbit burst $(burst "$up")kbit latency 100ms
ip link add ifb-eth0 type ifb
ip link set ifb-eth0 up
tc qdisc replace dev eth0 handle ffff: ingress
tc filter replace dev eth0 parent ffff: protocol all prio 1 u32 match u32 0 0 action mirred egress redirect dev ifb-eth0
tc qdisc replace dev ifb-eth0 root handle 1: netem $netem
tc qdisc replace dev ifb-eth0 parent 1:1 handle 10: tbf rate ${down}mbit burst $(burst "$down")kbit latency 100ms
exec pipelearn-client --device-id 0
EOF
}
for p in 4g 4g-plus wifi; do
    if [ ! -f "$profiles/$p.conf" ]; then
        not_ok "entrypoint, profile $p: no $profiles/$p.conf"
        continue
    fi
    got="$(env -i PATH="$PATH" NETEM_DRY_RUN=1 NETEM_PROFILE=$p PIPELEARN_NETEM_PROFILES="$profiles" \
        sh "$entry" pipelearn-client --device-id 0 2>"$tmp/err")"
    if [ "$got" = "$(expected $p)" ]; then
        ok "entrypoint, profile $p: $(head -n1 <<< "$got" | sed 's/.*netem //'), up $(profile_value $p uplink_mbit) / down $(profile_value $p downlink_mbit) Mbit/s"
    else
        not_ok "entrypoint, profile $p: tc commands"
        diff <(expected $p) <(echo "$got") | diag
        diag < "$tmp/err"
    fi
done
# The published 4g values (pipelearn-facts): 10/25 Mbit/s, 30 +- 5 ms, 0.1 %.
got="$(env -i PATH="$PATH" NETEM_DRY_RUN=1 NETEM_PROFILE=4g PIPELEARN_NETEM_PROFILES="$profiles" sh "$entry" true 2>/dev/null)"
check "entrypoint, 4g: delay 30ms 5ms loss 0.1%, 10 and 25 Mbit/s" \
    bash -c "grep -qx 'tc qdisc replace dev eth0 root handle 1: netem delay 30ms 5ms loss 0.1%' <<< '$got' &&
             grep -q 'tbf rate 10mbit' <<< '$got' && grep -q 'dev ifb-eth0 .*tbf rate 25mbit' <<< '$got'"
# Custom values override a profile; uplink only; no rate means no tbf.
got="$(env -i PATH="$PATH" NETEM_DRY_RUN=1 NETEM_PROFILE=wifi NETEM_DELAY_MS=7 NETEM_UPLINK_MBIT=0 \
    NETEM_DOWNLINK=0 NETEM_IFACE=eth1 PIPELEARN_NETEM_PROFILES="$profiles" sh "$entry" true 2>/dev/null)"
want="tc qdisc replace dev eth1 root handle 1: netem delay 7ms 1ms
exec true"
check "entrypoint: custom values override the profile (eth1, 7 ms, no rate, uplink only)" test "$got" = "$want"
for bad in "NETEM_PROFILE=../etc/passwd" "NETEM_PROFILE=5g" "NETEM_DELAY_MS=-3" "NETEM_LOSS_PCT=1;reboot"; do
    if env -i PATH="$PATH" NETEM_DRY_RUN=1 PIPELEARN_NETEM_PROFILES="$profiles" "$bad" \
        sh "$entry" true >/dev/null 2>&1; then
        not_ok "entrypoint refuses $bad"
    else
        ok "entrypoint refuses $bad"
    fi
done
# NETEM_PROFILE empty or "none" (CLIENT0_NETEM="" / none): no shaping.
for off in "" none; do
    out="$(env -i PATH="$PATH" NETEM_DRY_RUN=1 NETEM_PROFILE="$off" PIPELEARN_NETEM_PROFILES="$profiles" \
        sh "$entry" true 2>&1)"
    check "entrypoint: NETEM_PROFILE='$off' shapes nothing" test "$out" = "exec true"
done
if command -v docker-compose >/dev/null; then
    check "compose: CLIENT0_NETEM= (empty) reaches client0 as no profile" \
        grep -q "NETEM_PROFILE: ''" <<< "$(CLIENT0_NETEM= docker-compose -f "$compose" config 2>/dev/null)"
    check "compose: CLIENT0_NETEM unset means 4g" \
        grep -q "NETEM_PROFILE: 4g" <<< "$(env -u CLIENT0_NETEM docker-compose -f "$compose" config 2>/dev/null)"
fi
# The relay back-end (kernels without sch_netem): TAP pair and bridge,
# rates by tbf on the TAPs, delay/jitter/loss by pipelearn-relay.
got="$(env -i PATH="$PATH" NETEM_DRY_RUN=1 NETEM_BACKEND=relay NETEM_PROFILE=4g \
    PIPELEARN_NETEM_PROFILES="$profiles" sh "$entry" true 2>/dev/null)"
want="ip tuntap add dev pl-dev mode tap user pipelearn
ip tuntap add dev pl-wire mode tap user pipelearn
ip link add pl-br type bridge
ip addr flush dev eth0
ip link set eth0 down
ip link set eth0 address 0a:MAC
ip link set pl-dev address MAC
ip link set eth0 master pl-br
ip link set pl-wire master pl-br
ip link set eth0 up
ip link set pl-br up
ip link set pl-wire up
ip link set pl-dev up
ip addr add ADDR/PREFIX dev pl-dev
ip route replace default via GATEWAY dev pl-dev
tc qdisc replace dev pl-dev root handle 10: tbf rate 10mbit burst 40kbit latency 100ms
tc qdisc replace dev pl-wire root handle 10: tbf rate 25mbit burst 100kbit latency 100ms
pipelearn-relay --dev-if pl-dev --srv-if pl-wire --up-delay 30 --up-jitter 5 --up-loss 0.1 --down-delay 30 --down-jitter 5 --down-loss 0.1 --pid-file /run/pipelearn-relay/pid
exec true"
if [ "$got" = "$want" ]; then
    ok "entrypoint, 4g on the relay back-end: tbf 10/25 Mbit/s on the TAPs, relay 30 +- 5 ms, 0.1 %"
else
    not_ok "entrypoint, 4g on the relay back-end"
    diff <(echo "$want") <(echo "$got") | diag
fi
check "entrypoint refuses NETEM_BACKEND=bogus" bash -c "! env -i PATH='$PATH' NETEM_DRY_RUN=1 \
    NETEM_BACKEND=bogus NETEM_PROFILE=4g PIPELEARN_NETEM_PROFILES='$profiles' sh '$entry' true >/dev/null 2>&1"
# Without a profile: no tc at all; the command runs (here as the current
# user: PIPELEARN_USER=root stops the drop to "pipelearn").
out="$(env -i PATH="$PATH" PIPELEARN_USER=root sh "$entry" echo ran 2>&1)"
check "entrypoint without a profile runs its command and no tc" test "$out" = "ran"
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
    # As root (how a shaped container starts): the command runs as the
    # unprivileged user with no capabilities left and no_new_privs.
    out="$(env -i PATH="$PATH" PIPELEARN_USER=nobody sh "$entry" \
        sh -c 'id -u; grep -E "^(CapEff|CapBnd|CapAmb):|^NoNewPrivs:" /proc/self/status' 2>&1)"
    want="$(id -u nobody)
CapEff:	0000000000000000
CapBnd:	0000000000000000
CapAmb:	0000000000000000
NoNewPrivs:	1"
    if [ "$out" = "$want" ]; then
        ok "entrypoint as root drops to the user, no capabilities, no_new_privs"
    else
        not_ok "entrypoint as root drops to the user, no capabilities, no_new_privs"
        diag <<< "$out"
    fi
else
    skip "entrypoint drops root" "not root"
fi
if [ "$(id -u)" != 0 ]; then
    out="$(env -i PATH="$PATH" NETEM_PROFILE=4g PIPELEARN_NETEM_PROFILES="$profiles" sh "$entry" true 2>&1)"
    check "entrypoint with a profile, not root: refuses, naming cap_add NET_ADMIN" grep -q "NET_ADMIN" <<< "$out"
fi

# --- 5. pipelearn-compose-keys ------------------------------------------------
keygen="${PL_BUILD_DIR:-}/server/pipelearn-keygen"
if [ -x "$keygen" ]; then
    mkdir -p "$tmp/bin"
    ln -s "$keygen" "$tmp/bin/pipelearn-keygen"
    PATH="$tmp/bin:$PATH" sh "$src/deploy/compose/pipelearn-compose-keys" "$tmp/keys" 3 >/dev/null 2>&1
    check "compose keys: server and 3 device pairs, secrets 0600" bash -c "
        for k in server device0 device1 device2; do
            test -s '$tmp/keys/'\$k && test \"\$(stat -c %a '$tmp/keys/'\${k}_secret)\" = 600 || exit 1
        done"
    check "compose keys: allow-list holds exactly the 3 device public certificates" \
        test "$(ls "$tmp/keys/allow" | tr '\n' ' ')" = "device0 device1 device2 "
    before="$(md5sum "$tmp/keys/server_secret")"
    PATH="$tmp/bin:$PATH" sh "$src/deploy/compose/pipelearn-compose-keys" "$tmp/keys" 3 >/dev/null 2>&1
    check "compose keys: a second run keeps the existing keys" test "$before" = "$(md5sum "$tmp/keys/server_secret")"
else
    skip "pipelearn-compose-keys" "no pipelearn-keygen in the build"
fi

echo "1..$n"
exit $failed
