#!/usr/bin/env bash
# tests/deploy/test_systemd_engine.sh: the systemd units under systemd as
# PID 1 (TAP). As root.
#
# A Debian 12 tree (debootstrap, cached by engine_lib.sh) is booted with
# `systemd-nspawn -b --register=no --keep-unit --private-network`, and
# docs/deploy.md is followed word for word inside it: `meson setup
# --prefix=/usr/local --sysconfdir=/etc` (tests off, for time), `meson
# install` (into the tree), `systemctl daemon-reload`, `pipelearn-keygen`
# for the server and two devices, the public certificates in keys/allow,
# server.env and client.env, `systemctl enable --now pipelearn-server` and
# `pipelearn-client@0`, `@1`. A small run (synthetic data) then checks:
#   - hardening in force: dynamic uid, no capabilities, seccomp, no new
#     privileges, `/` and /etc/pipelearn read-only, the process names;
#   - `kill -9` of a client's main PID: systemd restarts it and the server
#     says it rejoins within 15 s;
#   - `systemctl restart pipelearn-server` mid-run: the devices wait, the
#     server resumes from the checkpoint of the epoch it was in (no epoch
#     lost), the run completes with every epoch in summary.json;
#   - every unit inactive at the end, none failed, the clients not
#     restarted after the run.
# A machine that cannot boot the tree (not root, no namespaces) fails here
# with the reason; nothing is skipped.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="${PL_SOURCE_DIR:-$(cd "$here/../.." && pwd)}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/pl-systemd-engine.XXXXXX")"
. "$here/engine_lib.sh"

tree="$tmp/tree"
nspawn_pid=""
init_pid=""

cleanup() {
    if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
        [ -n "$init_pid" ] && nsenter -t "$init_pid" -a systemctl poweroff >/dev/null 2>&1
        for _ in $(seq 150); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.2; done
        if kill -0 "$nspawn_pid" 2>/dev/null; then
            echo "# the tree did not power off in 30 s: stopping systemd-nspawn $nspawn_pid"
            kill -TERM "$nspawn_pid"
            sleep 5
            kill -KILL "$nspawn_pid" 2>/dev/null
        fi
        wait "$nspawn_pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || bail "booting a tree with systemd-nspawn needs root; run the deploy suite as root"
t_start=$(date +%s)
need_packages systemd-container debootstrap ||
    bail "apt-get install systemd-container debootstrap failed (log above)"

# inside CMD...: run CMD inside the booted tree.
inside() { nsenter -t "$init_pid" -a "$@"; }

# --- the tree and the install, as docs/deploy.md says ---------------------------
tarball="$(debian_tarball minbase "systemd,systemd-sysv,dbus,procps,libzmq5,libczmq4,libopenblas0,libcjson1,libsodium23,zlib1g,libzstd1,libgomp1,libmicrohttpd12")" ||
    bail "debootstrap of a Debian 12 tree with systemd failed"
mkdir -p "$tree"
tar -C "$tree" -xf "$tarball" || bail "cannot unpack $tarball"
chmod 755 "$tree"       # its / : readable by the services' users
t0=$(date +%s)
if meson setup "$tmp/build" "$src" --prefix=/usr/local --sysconfdir=/etc \
        --buildtype=release -Dtests=false > "$tmp/setup.log" 2>&1 &&
   ninja -C "$tmp/build" > "$tmp/ninja.log" 2>&1 &&
   DESTDIR="$tree" meson install -C "$tmp/build" --no-rebuild > "$tmp/install.log" 2>&1; then
    ok "meson setup --prefix=/usr/local --sysconfdir=/etc, ninja, meson install into the tree ($(( $(date +%s) - t0 )) s)"
else
    tail -n 20 "$tmp"/*.log | diag
    bail "build and install for the tree failed"
fi

# --- boot ----------------------------------------------------------------------
systemd-nspawn -b -D "$tree" --register=no --keep-unit --private-network \
    --console=read-only > "$tmp/boot.log" 2>&1 &
nspawn_pid=$!
for _ in $(seq 300); do
    # The tree's init: the descendant of systemd-nspawn named systemd.
    for p in $(pgrep -P "$nspawn_pid") $(pgrep -P "$(pgrep -P "$nspawn_pid" | head -n1)" 2>/dev/null); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = systemd ] && { init_pid=$p; break; }
    done
    [ -n "$init_pid" ] && break
    kill -0 "$nspawn_pid" 2>/dev/null || break
    sleep 0.1
done
[ -n "$init_pid" ] || { tail -n 20 "$tmp/boot.log" | diag; nspawn_pid=""; bail "systemd-nspawn -b did not boot the tree (log above): this machine cannot run systemd as PID 1 in a container"; }
state=""
for _ in $(seq 120); do
    state="$(inside systemctl is-system-running 2>/dev/null)"
    case "$state" in running|degraded) break ;; esac
    sleep 0.5
done
check "the tree booted: systemd as PID 1 is '$state'" test "$state" = running -o "$state" = degraded
[ "$state" = degraded ] && inside systemctl --failed --no-legend | diag

# --- docs/deploy.md: keys, configs, start ---------------------------------------------
inside systemctl daemon-reload
for k in server device0 device1; do
    inside pipelearn-keygen /etc/pipelearn/keys/$k > /dev/null || not_ok "pipelearn-keygen /etc/pipelearn/keys/$k"
done
inside cp /etc/pipelearn/keys/device0 /etc/pipelearn/keys/device1 /etc/pipelearn/keys/allow/
check "keys: secrets 0600 root, public certificates in keys/allow" test \
    "$(inside stat -c '%a %U' /etc/pipelearn/keys/server_secret /etc/pipelearn/keys/device0_secret | sort -u)" = "600 root" -a \
    "$(inside ls /etc/pipelearn/keys/allow | tr '\n' ' ')" = "device0 device1 "
# A small run: synthetic data, 4 epochs, FedAvg every 5 iterations (a
# restarted device rejoins at the next one).
cat > "$tree/etc/pipelearn/server.env" <<'EOF'
PIPELEARN_SERVER_OPTS="--set dataset=synthetic --set samples=8000 --set test_samples=500 --set epochs=4 --set aggregation_frequency=5"
EOF
cat > "$tree/etc/pipelearn/client.env" <<'EOF'
PIPELEARN_SERVER=tcp://127.0.0.1:5555
PIPELEARN_CLIENT_OPTS="--threads 1"
EOF
inside systemctl enable --now pipelearn-server > /dev/null 2>&1
check "systemctl enable --now pipelearn-server" test "$(inside systemctl is-active pipelearn-server)" = active
for i in 0 1; do inside systemctl enable --now pipelearn-client@$i > /dev/null 2>&1; done
# journal PATTERN: the server's journal lines matching PATTERN.
journal() { inside journalctl -u pipelearn-server --no-pager -o cat 2>/dev/null | grep -- "$1"; }
wait_journal() {
    local t
    for ((t = 0; t < $2 * 5; t++)); do journal "$1" > /dev/null && return 0; sleep 0.2; done
    return 1
}
if wait_journal "joined; training" 120; then
    ok "both devices joined; training"
else
    not_ok "both devices joined; training"
    inside journalctl -u 'pipelearn-*' --no-pager -o cat | tail -n 30 | diag
fi

# --- hardening and names ------------------------------------------------------------
mainpid() { inside systemctl show -p MainPID --value "$1"; }
for u in pipelearn-server pipelearn-client@0; do
    pid="$(mainpid $u)"
    # The tree's PID namespace is the host's child: read /proc inside it.
    status="$(inside cat /proc/$pid/status 2>/dev/null)"
    uid="$(awk '/^Uid:/ { print $2 }' <<< "$status")"
    check "$u: dynamic user (uid $uid in 61184..65519)" \
        test -n "$uid" -a "${uid:-0}" -ge 61184 -a "${uid:-0}" -le 65519
    check "$u: no capabilities (CapEff, CapPrm, CapBnd all 0)" test \
        "$(grep -E '^Cap(Eff|Prm|Bnd):' <<< "$status" | awk '{ print $2 }' | sort -u)" = 0000000000000000
    check "$u: seccomp filter (mode 2) and no_new_privs" test \
        "$(grep -cE '^(Seccomp:[[:space:]]+2|NoNewPrivs:[[:space:]]+1)$' <<< "$status")" = 2
    for path in / /etc/pipelearn; do
        opts="$(inside findmnt -N "$pid" -T "$path" -no OPTIONS 2>/dev/null)"
        check "$u: $path read-only ($(cut -d, -f1 <<< "$opts"))" test "${opts%%,*}" = ro
    done
    comm="$(inside cat /proc/$pid/comm)"
    want="$(echo "${u%%@*}" | cut -c1-15)"
    check "$u: process name '$comm'" test "$comm" = "$want"
done
security="$(inside systemd-analyze security --no-pager pipelearn-server.service 2>&1 | tail -n1)"
echo "# systemd-analyze security pipelearn-server: ${security}"

# --- kill -9 of a client's main PID -------------------------------------------------
rejoins() { journal "device 0 rejoins" | wc -l; }
before="$(rejoins)"
pid="$(mainpid pipelearn-client@0)"
inside kill -9 "$pid"
back="$(seconds_until 20 eval '[ "$(rejoins)" -gt "$before" ]')"
if [ -n "$back" ] && awk -v b="$back" 'BEGIN { exit !(b <= 15) }'; then
    ok "kill -9 of pipelearn-client@0's main PID $pid: training again after $back s (<= 15 s)"
else
    not_ok "kill -9 of pipelearn-client@0's main PID $pid: training again within 15 s (${back:-not in 20 s})"
    inside journalctl -u 'pipelearn-*' --no-pager -o cat | tail -n 20 | diag
fi

# --- systemctl restart pipelearn-server mid-run --------------------------------------
# The epoch in progress: one more than summary.json's epochs.
done_epochs() {
    inside cat /var/lib/private/pipelearn-server/summary.json 2>/dev/null |
        /usr/bin/python3 -c 'import json, sys; print(len(json.load(sys.stdin)["epochs"]))' 2>/dev/null ||
        echo 0
}
epoch=$(( $(done_epochs) + 1 ))
inside systemctl restart pipelearn-server
if wait_journal "resuming from .*: epoch $epoch" 60 || wait_journal "resuming from .*: epoch" 1; then
    line="$(journal "resuming from" | tail -n1)"
    check "systemctl restart mid epoch $epoch: ${line#server: }" grep -q "epoch $epoch," <<< "$line"
else
    not_ok "systemctl restart pipelearn-server: the server resumed from its checkpoint"
    inside journalctl -u 'pipelearn-*' --no-pager -o cat | tail -n 30 | diag
fi
check "the devices waited for the restarted server by themselves (not restarted by systemd)" \
    test "$(inside systemctl show -p NRestarts --value pipelearn-client@1)" = 0

# --- the end of the run --------------------------------------------------------------------
for _ in $(seq 600); do
    [ "$(inside systemctl is-active pipelearn-server pipelearn-client@0 pipelearn-client@1 | sort -u)" = inactive ] && break
    sleep 0.5
done
for u in pipelearn-server pipelearn-client@0 pipelearn-client@1; do
    check "$u: inactive after the run, exit status 0" test \
        "$(inside systemctl show -p ActiveState --value $u)/$(inside systemctl show -p ExecMainStatus --value $u)" = inactive/0
done
failed_units="$(inside systemctl list-units --failed --no-legend --plain 'pipelearn*' 2>/dev/null)"
check "no pipelearn unit failed${failed_units:+: $failed_units}" test -z "$failed_units"
epochs="$(done_epochs)"
check "summary.json holds all 4 epochs after the restart (got $epochs)" test "$epochs" = 4
for f in summary.json timeline.csv model.ckpt; do
    check "results: $f in /var/lib/pipelearn-server" inside test -s /var/lib/private/pipelearn-server/$f
done
sleep 3
check "no client started again after the run" test \
    "$(inside systemctl is-active pipelearn-client@0 pipelearn-client@1 | sort -u)" = inactive

echo "# whole test: $(( $(date +%s) - t_start )) s"
echo "1..$n"
exit $failed
