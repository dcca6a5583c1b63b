#!/usr/bin/env bash
# tests/deploy/test_compose_engine.sh: the Compose lab on a real Docker
# Engine, as the README runs it (TAP). As root.
#
#   1. installs docker.io, docker-compose and debootstrap if missing; uses a
#      running Docker Engine, or starts containerd and dockerd itself (data
#      in $PL_ENGINE_CACHE/docker, so images and build layers are kept
#      between runs) and at the end stops exactly those, by PID;
#   2. debian:12 and debian:12-slim: pulled if a registry answers, otherwise
#      imported from a debootstrap tree (cached, engine_lib.sh);
#   3. CLIENT0_NETEM=5g: `up` stops by itself with client0-netcheck's reason,
#      the server never starts (no restart loop);
#   4. the README's command, `docker-compose -f deploy/compose/docker-compose.yml
#      -p NAME up --build`, with client0 on 4g, 2 epochs of 2000 samples and
#      aggregation every iteration; client0's process is SIGKILLed in epoch
#      1; asserts: it trains again (the server's "device 0 rejoins") within
#      10 s, `up` returns by itself when the run is done, every device is
#      active in every epoch, the results volume holds summary.json,
#      timeline.csv and model.ckpt, client0's measured uplink is 10 Mbit/s
#      within 20 % and device 1's is not limited.
# A machine that cannot run the engine (not root, no overlay, no user or
# network namespaces) fails here with the reason; nothing is skipped.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="${PL_SOURCE_DIR:-$(cd "$here/../.." && pwd)}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/pl-compose-engine.XXXXXX")"
. "$here/engine_lib.sh"

project=plci
compose_file="$src/deploy/compose/docker-compose.yml"
started_pids=()         # containerd and dockerd, if this test started them
up_pid=""

cleanup() {
    if [ -n "${DOCKER_HOST:-}" ] && docker info >/dev/null 2>&1; then
        docker-compose -f "$compose_file" -p "$project" down -v --remove-orphans \
            >/dev/null 2>&1
        # Earlier runs' images, untagged by this run's build: the cache would
        # grow by an image (~1 GB with its build stage) per run. This run's
        # stay, so the next build reuses their apt layers.
        [ -n "${t_start:-}" ] && docker image prune -f \
            --filter "until=$(date -u -d "@$t_start" +%Y-%m-%dT%H:%M:%SZ)" >/dev/null 2>&1
    fi
    [ -n "$up_pid" ] && kill "$up_pid" 2>/dev/null
    # dockerd before containerd, each by its PID, each waited for.
    local i p
    for ((i = ${#started_pids[@]} - 1; i >= 0; i--)); do
        p=${started_pids[i]}
        kill -TERM "$p" 2>/dev/null || continue
        for _ in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
        kill -0 "$p" 2>/dev/null && { echo "# pid $p ignored SIGTERM for 30 s: SIGKILL"; kill -KILL "$p"; }
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || bail "the Docker Engine test needs root (it installs packages and runs dockerd); run the deploy suite as root"
t_start=$(date +%s)

# --- 1. the engine ----------------------------------------------------------
need_packages docker.io docker-compose debootstrap ||
    bail "apt-get install docker.io docker-compose debootstrap failed (log above)"
run_dir=/run/pipelearn-engines
mkdir -p "$run_dir" "$engine_cache"
if DOCKER_HOST=unix:///var/run/docker.sock docker info >/dev/null 2>&1; then
    export DOCKER_HOST=unix:///var/run/docker.sock
    log "using the running Docker Engine at $DOCKER_HOST"
else
    export DOCKER_HOST="unix://$run_dir/docker.sock"
    containerd --address "$run_dir/containerd.sock" --root "$engine_cache/containerd" \
        --state "$run_dir/containerd" > "$tmp/containerd.log" 2>&1 &
    started_pids+=($!)
    for _ in $(seq 100); do [ -S "$run_dir/containerd.sock" ] && break; sleep 0.1; done
    dockerd --host="$DOCKER_HOST" --containerd="$run_dir/containerd.sock" \
        --data-root "$engine_cache/docker" --exec-root "$run_dir/docker" \
        --pidfile "$run_dir/dockerd.pid" > "$tmp/dockerd.log" 2>&1 &
    started_pids+=($!)
    for _ in $(seq 300); do docker info >/dev/null 2>&1 && break; sleep 0.1; done
    if ! docker info >/dev/null 2>&1; then
        tail -n 20 "$tmp/containerd.log" "$tmp/dockerd.log" | diag
        bail "dockerd did not come up (log above): this machine cannot run the Docker Engine"
    fi
    log "started containerd (pid ${started_pids[0]}) and dockerd (pid ${started_pids[1]})"
fi
driver="$(docker info --format '{{.Driver}}' 2>/dev/null)"
ok "Docker Engine $(docker version --format '{{.Server.Version}}' 2>/dev/null) runs (storage $driver), docker-compose $(docker-compose version --short 2>/dev/null)"

# --- 2. base images -----------------------------------------------------------
if ! docker image inspect debian:12 >/dev/null 2>&1; then
    if timeout 30 docker pull debian:12 >/dev/null 2>&1 &&
       timeout 30 docker pull debian:12-slim >/dev/null 2>&1; then
        log "pulled debian:12 and debian:12-slim"
    else
        tarball="$(debian_tarball minbase "")" ||
            bail "no registry and debootstrap failed: cannot make debian:12"
        docker import "$tarball" debian:12 >/dev/null || bail "docker import $tarball failed"
        docker tag debian:12 debian:12-slim
        log "made debian:12 and debian:12-slim from $tarball"
    fi
fi
docker image inspect debian:12-slim >/dev/null 2>&1 || docker tag debian:12 debian:12-slim
check "base images debian:12 and debian:12-slim" bash -c 'docker image inspect debian:12 debian:12-slim >/dev/null'

# compose NAME=VALUE... -- ARGS: docker-compose with the lab's variables.
compose() {
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" docker-compose -f "$compose_file" -p "$project" "$@"
}
t0=$(date +%s)
if compose -- build > "$tmp/build.log" 2>&1; then
    ok "docker-compose build ($(( $(date +%s) - t0 )) s)"
else
    not_ok "docker-compose build"
    tail -n 30 "$tmp/build.log" | diag
    echo "1..$n"
    exit 1
fi
compose -- down -v --remove-orphans >/dev/null 2>&1

# --- 3. a profile that cannot apply stops the lab ----------------------------
t0=$(date +%s)
timeout 120 env CLIENT0_NETEM=5g docker-compose -f "$compose_file" -p "$project" up \
    > "$tmp/bad.log" 2>&1
rc=$?
took=$(( $(date +%s) - t0 ))
if [ $rc != 0 ] && [ $rc != 124 ] && grep -q "client0-netcheck" "$tmp/bad.log"; then
    ok "CLIENT0_NETEM=5g: up returns by itself (rc $rc, ${took} s), naming client0-netcheck"
else
    not_ok "CLIENT0_NETEM=5g: up returns by itself naming client0-netcheck (rc $rc, ${took} s)"
    tail -n 20 "$tmp/bad.log" | diag
fi
check "CLIENT0_NETEM=5g: the reason is in client0-netcheck's log" \
    grep -q "no profile '5g'" <<< "$(compose -- logs --no-color client0-netcheck 2>&1)"
restarts="$(docker inspect -f '{{.RestartCount}}' "$(compose -- ps -q client0 2>/dev/null)" 2>/dev/null)"
check "CLIENT0_NETEM=5g: client0 never ran (no restart loop)" test -z "$restarts"
check "CLIENT0_NETEM=5g: the server never started" test -z "$(compose -- ps -q server 2>/dev/null)"
compose -- down -v --remove-orphans >/dev/null 2>&1

# --- 4. the README's command, a killed client, the run to its end ------------
lab_env=(CLIENT0_NETEM=4g PIPELEARN_SAMPLES=2000 PIPELEARN_EPOCHS=2 PIPELEARN_AGGREGATION=1)
t0=$(date +%s)
env "${lab_env[@]}" timeout 900 docker-compose -f "$compose_file" -p "$project" up --build \
    --no-color > "$tmp/up.log" 2>&1 &
up_pid=$!
server_ctr=""
# wait_log CONTAINER PATTERN SECONDS: 0 when the container's log matches.
wait_log() {
    local t
    for ((t = 0; t < $3 * 5; t++)); do
        docker logs "$1" 2>&1 | grep -q -- "$2" && return 0
        kill -0 "$up_pid" 2>/dev/null || return 1
        sleep 0.2
    done
    return 1
}
for _ in $(seq 600); do
    server_ctr="$(compose -- ps -q server 2>/dev/null)"
    [ -n "$server_ctr" ] && break
    kill -0 "$up_pid" 2>/dev/null || break
    sleep 0.5
done
[ -n "$server_ctr" ] || { tail -n 30 "$tmp/up.log" | diag; bail "the server container never started"; }
wait_log "$server_ctr" "device(s) joined; training" 300 ||
    { tail -n 30 "$tmp/up.log" | diag; bail "the run did not start within 300 s"; }
# Asked once both devices have joined: client0's container exists by then
# (asked as soon as the server's did, it was not always there yet).
client0_ctr="$(compose -- ps -q client0 2>/dev/null)"
# Mid-epoch 1 (an iteration takes about 2 s on 4g): SIGKILL the client's
# process (the container's PID 1).
sleep 6
pid="$(docker inspect -f '{{.State.Pid}}' "$client0_ctr" 2>/dev/null)"
if [ -n "$pid" ] && [ "$pid" != 0 ] && grep -q pipelearn-client "/proc/$pid/cmdline" 2>/dev/null; then
    rejoins() { docker logs "$server_ctr" 2>&1 | grep -c "device 0 rejoins"; }
    before="$(rejoins)"
    kill -KILL "$pid"
    back="$(seconds_until 30 eval '[ "$(rejoins)" -gt "$before" ]')"
    if [ -n "$back" ] && awk -v b="$back" 'BEGIN { exit !(b <= 10) }'; then
        ok "SIGKILL of client0's process (pid $pid): training again after $back s (<= 10 s)"
    else
        not_ok "SIGKILL of client0's process (pid $pid): training again within 10 s (${back:-not in 30 s})"
        docker logs --tail 20 "$server_ctr" 2>&1 | diag
        docker logs --tail 20 "$client0_ctr" 2>&1 | diag
    fi
else
    not_ok "client0's process found to kill (pid '${pid}')"
    docker logs --tail 20 "$client0_ctr" 2>&1 | diag
fi
wait "$up_pid"
rc=$?
up_pid=""
took=$(( $(date +%s) - t0 ))
if [ $rc = 0 ]; then
    ok "docker-compose up returned by itself when the run was done (${took} s)"
else
    not_ok "docker-compose up returned by itself when the run was done (rc $rc after ${took} s)"
    tail -n 40 "$tmp/up.log" | diag
fi
check "server exited 0" test "$(docker inspect -f '{{.State.ExitCode}}' "$server_ctr")" = 0
grep -q "back-end relay\|back-end netem" "$tmp/up.log" && \
    echo "# client0: $(grep -m1 -o 'back-end [a-z]*[^)]*' "$tmp/up.log")"

# The results volume, read through a throw-away container.
docker run --rm -v "${project}_results:/r:ro" --entrypoint sh pipelearn:latest -c \
    'cd /r && ls && cat summary.json' > "$tmp/results.txt" 2>&1
for f in summary.json timeline.csv model.ckpt; do
    check "results volume holds $f" grep -qx "$f" "$tmp/results.txt"
done
sed -n '/^{/,$p' "$tmp/results.txt" > "$tmp/summary.json"
/usr/bin/python3 - "$tmp/summary.json" > "$tmp/summary.check" 2>&1 <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
eps = s["epochs"]
print("epochs", len(eps))
for e in eps:
    for d in e["devices"]:
        print("epoch %d device %d active %s samples %d uplink_mbps_traffic %s"
              % (e["epoch"], d["id"], d["active"], d["samples"], d.get("uplink_mbps_traffic")))
EOF
diag < "$tmp/summary.check"
check "summary.json: 2 epochs" grep -qx "epochs 2" "$tmp/summary.check"
check "summary.json: every device active in every epoch" \
    test "$(grep -c 'active True' "$tmp/summary.check")" = 4
up0="$(awk '/epoch 2 device 0/ { print $NF }' "$tmp/summary.check")"
up1="$(awk '/epoch 2 device 1/ { print $NF }' "$tmp/summary.check")"
check "client0's measured uplink ${up0} Mbit/s is 4g's 10 within 20 %" \
    awk -v u="$up0" 'BEGIN { exit !(u >= 8 && u <= 12) }'
check "device 1 (unshaped) measured above 20 Mbit/s (${up1})" \
    awk -v u="$up1" 'BEGIN { exit !(u > 20) }'

echo "# whole test: $(( $(date +%s) - t_start )) s"
echo "1..$n"
exit $failed
