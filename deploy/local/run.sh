#!/usr/bin/env bash
# `make run`: scheduler (in-process store), catalog (SQLite, seeded with deploy/config/packs.toml),
# synthesis (local espeak-ng engine, with its OpenAI-compatible HTTP front) and jobs (with its own
# redis-server for the queue, when redis-server is installed), with the example config, plus a
# fake GPU server for the zero-shot pool and a fake ElevenLabs that clones voices (pool
# elevenlabs-clones), and the browser console over them (docs/CONSOLE.md). Ports and the run
# directory: deploy/local/ports.sh (VOXPOOL_PORT_*, VOXPOOL_RUN_DIR).
#
# Stopping. Every process runs in a session of its own (setsid), so a terminal's Ctrl-C reaches
# this script only, which then sends each process one SIGTERM, in dependency order: the console,
# then jobs, then
# synthesis, then catalog and scheduler, then the jobs Redis and the two fake vendors, each
# group once the one before has exited, so every service drains (calls in flight finish) while
# what it depends on still answers. A second Ctrl-C kills what is left at once (SIGKILL). If one
# of the services (or the jobs Redis) dies, the others are stopped the same way and its name is
# said. The fakes may die (a vendor outage): the stack stays up. The fake GPU server may die (`make gpu-server-stop`, to see a server fail): the stack
# stays up, `make gpu-server-start` starts it again, and the stack stops that one too.
# Ports taken by another process (a second `make run`) are named before anything starts, and
# the ready line is printed only once every service has said it listens, so it comes last.
set -euo pipefail
# Started in the background by a non-interactive shell (`make run &` in a script, a CI step),
# this script inherits SIGINT ignored, as POSIX has it for such background jobs, and bash cannot
# trap a signal that was ignored on entry: `kill -INT` would do nothing. So it runs itself again,
# same pid, with SIGINT at its default (GNU env), and the trap below sees it as it sees Ctrl-C.
sigint_ignored() {
    local mask
    mask=$(awk '/^SigIgn:/ { print $2 }' "/proc/$$/status" 2>/dev/null) || return 1
    [ -n "$mask" ] && (((16#$mask >> 1) & 1))
}
if sigint_ignored; then
    if [ -z "${VOXPOOL_RUN_SIGINT_RESET:-}" ] && env --default-signal=INT true 2>/dev/null; then
        export VOXPOOL_RUN_SIGINT_RESET=1
        exec env --default-signal=INT "$BASH" "$0" "$@"
    fi
    echo "make run: SIGINT is ignored here (started in the background by a script): stop the stack with SIGTERM (kill $$)" >&2
fi
unset VOXPOOL_RUN_SIGINT_RESET
cd "$(dirname "$0")/../.."
# shellcheck source=deploy/local/ports.sh
. deploy/local/ports.sh

BIN=${CARGO_TARGET_DIR:-target}/debug
DATA=$VOXPOOL_RUN_DIR
mkdir -p "$DATA"
DATA=$(cd "$DATA" && pwd)
export VOXPOOL_ADMIN_TOKEN=${VOXPOOL_ADMIN_TOKEN:-dev-admin-token-local}
# The secret lease ids are signed with (scheduler.lease_secret): configured, so the ids callers
# hold still verify after a restart of the memory-store scheduler.
export VOXPOOL_LEASE_SECRET=${VOXPOOL_LEASE_SECRET:-dev-lease-secret-local-0123456789abcdef}
export VOXPOOL_SCHEDULER__LEASE_SECRET__ENV=VOXPOOL_LEASE_SECRET
# Client tokens of the example config's [[client_tokens]]: synthesis presents its own to the
# scheduler, jobs its own to synthesis; voxctl and grpcurl present the voxctl one
# (VOXPOOL_CLIENT_TOKEN for voxctl), which synthesis, the scheduler and jobs accept.
export VOXPOOL_CLIENT_TOKEN_SYNTHESIS=${VOXPOOL_CLIENT_TOKEN_SYNTHESIS:-dev-client-token-synthesis}
export VOXPOOL_CLIENT_TOKEN_JOBS=${VOXPOOL_CLIENT_TOKEN_JOBS:-dev-client-token-jobs}
export VOXPOOL_CLIENT_TOKEN_VOXCTL=${VOXPOOL_CLIENT_TOKEN_VOXCTL:-dev-client-token-voxctl}
# The API key of the example config's [[http.api_keys]]: OpenAI-compatible clients send it as
# `Authorization: Bearer <key>` to the HTTP front.
export VOXPOOL_HTTP_API_KEY=${VOXPOOL_HTTP_API_KEY:-dev-http-key-local}
# The secret jobs sign their webhooks with (voxctl job submit --webhook-url).
export VOXPOOL_JOBS_WEBHOOK_SECRET=${VOXPOOL_JOBS_WEBHOOK_SECRET:-dev-webhook-secret-local}
# The console's read-only sign-in token (the admin token signs admins in).
export VOXPOOL_CONSOLE_TOKEN=${VOXPOOL_CONSOLE_TOKEN:-dev-console-token-local}
# The fake ElevenLabs' two keys (pool elevenlabs-clones): dev values it accepts, both in its one
# workspace, so they share the voices cloned there.
export VOXPOOL_FAKE_ELEVENLABS_KEY_1=${VOXPOOL_FAKE_ELEVENLABS_KEY_1:-dev-elevenlabs-key-1}
export VOXPOOL_FAKE_ELEVENLABS_KEY_2=${VOXPOOL_FAKE_ELEVENLABS_KEY_2:-dev-elevenlabs-key-2}
DB="sqlite://$DATA/voxpool.db?mode=rwc"

# The example config names the fakes' default URLs: on other ports, a copy in the run dir
# names those.
if [ -n "${VOXPOOL_CONFIG:-}" ]; then
    CONFIG=$VOXPOOL_CONFIG
elif [ "$VOXPOOL_PORT_GPU_SERVER" = 50071 ] && [ "$VOXPOOL_PORT_ELEVENLABS" = 50072 ]; then
    CONFIG=deploy/config/example.toml
else
    CONFIG="$DATA/example.toml"
    sed -e "s|http://127.0.0.1:50071|http://127.0.0.1:$VOXPOOL_PORT_GPU_SERVER|" \
        -e "s|http://127.0.0.1:50072|http://127.0.0.1:$VOXPOOL_PORT_ELEVENLABS|" deploy/config/example.toml >"$CONFIG"
fi

# One stack per run dir: its SQLite file, Redis files and pid files are this stack's.
if [ -f "$DATA/run.pid" ] && kill -0 "$(cat "$DATA/run.pid")" 2>/dev/null \
    && grep -qa run.sh "/proc/$(cat "$DATA/run.pid")/cmdline" 2>/dev/null; then
    echo "make run: another make run (pid $(cat "$DATA/run.pid")) uses the run dir $DATA: stop it, or give this one its own VOXPOOL_RUN_DIR and ports (deploy/local/ports.sh)" >&2
    exit 1
fi

# The jobs service keeps its queue in a redis-server of its own: without one (or without the
# binary) the rest of the stack runs and jobs is left out, with the reason.
jobs_skipped=""
if ! command -v redis-server >/dev/null; then
    jobs_skipped="redis-server not found (apt-get install redis-server, or make setup): the jobs service is not started (its queue lives in Redis); the rest of the stack runs"
elif [ ! -x "$BIN/voxpool-jobs" ]; then
    jobs_skipped="$BIN/voxpool-jobs not built (make build): the jobs service is not started; the rest of the stack runs"
fi
ports="scheduler:$VOXPOOL_PORT_SCHEDULER catalog:$VOXPOOL_PORT_CATALOG synthesis:$VOXPOOL_PORT_SYNTHESIS"
ports="$ports synthesis-http:$VOXPOOL_PORT_HTTP fake-gpu-server:$VOXPOOL_PORT_GPU_SERVER"
ports="$ports fake-elevenlabs:$VOXPOOL_PORT_ELEVENLABS console:$VOXPOOL_PORT_CONSOLE"
[ -z "$jobs_skipped" ] && ports="$ports jobs:$VOXPOOL_PORT_JOBS jobs-redis:$VOXPOOL_PORT_JOBS_REDIS"

taken=()
for spec in $ports; do
    if (exec 3<>"/dev/tcp/127.0.0.1/${spec#*:}") 2>/dev/null; then taken+=("$spec"); fi
done
if [ ${#taken[@]} -gt 0 ]; then
    for spec in "${taken[@]}"; do
        var=VOXPOOL_PORT_$(echo "${spec%%:*}" | tr 'a-z-' 'A-Z_' | sed 's/^FAKE_//; s/SYNTHESIS_HTTP/HTTP/')
        echo "make run: port ${spec#*:} (the ${spec%%:*}'s) is taken by another process: a make run still running, or see \`ss -ltnp 'sport = :${spec#*:}'\`; stop it first, or pick another port with $var=…" >&2
    done
    exit 1
fi

command -v espeak-ng >/dev/null || echo "warning: espeak-ng not found (apt-get install espeak-ng, or make setup): the espeak-local pool's calls will fail" >&2
[ -z "$jobs_skipped" ] || echo "warning: $jobs_skipped" >&2

echo $$ >"$DATA/run.pid"
declare -A pid_of=()     # name -> pid of every process started
declare -A watched=()    # pid -> name of those whose death stops the stack

# The fake GPU server now running: the one started here, or one started again by
# `make gpu-server-start` (deploy/local/gpu-server.sh), whose pid is in the pid file.
gpu_server_pid() {
    local pid
    pid=$(cat "$DATA/fake-gpu-server.pid" 2>/dev/null) || return 0
    grep -qa voxpool-fake-vendor "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
    return 0
}

# Stops every process still running, one SIGTERM each, a group at a time in dependency order
# (each group once the one before has exited); a group still running after 120 s is killed.
stop_all() {
    local group name pid pids waited
    for group in "console" "jobs" "synthesis" "catalog scheduler" "jobs-redis fake-gpu-server fake-elevenlabs"; do
        pids=()
        for name in $group; do
            pid=${pid_of[$name]:-}
            [ "$name" = fake-gpu-server ] && pid=$(gpu_server_pid)
            if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then pids+=("$pid"); fi
        done
        [ ${#pids[@]} -gt 0 ] || continue
        kill -TERM "${pids[@]}" 2>/dev/null || true
        waited=0
        for pid in "${pids[@]}"; do
            while kill -0 "$pid" 2>/dev/null; do
                if [ "$waited" -ge 1200 ]; then
                    echo "make run: $group still running 120 s after SIGTERM: killing it" >&2
                    kill -KILL "${pids[@]}" 2>/dev/null || true
                    break 2
                fi
                sleep 0.1
                waited=$((waited + 1))
            done
        done
    done
    rm -f "$DATA/run.pid" "$DATA/fake-gpu-server.pid"
}

# Kills whatever is still running (a second Ctrl-C, or a failed start-up's exit).
kill_all() {
    local pids=("${pid_of[@]}")
    local gpu
    gpu=$(gpu_server_pid)
    [ -z "$gpu" ] || pids+=("$gpu")
    kill -KILL "${pids[@]}" 2>/dev/null || true
    rm -f "$DATA/run.pid" "$DATA/fake-gpu-server.pid"
}

# Why the stack is stopping, once a stop was asked for: Ctrl-C, SIGTERM, SIGHUP.
stopping=""
on_signal() {
    if [ -n "$stopping" ]; then
        echo "make run: $1 again: killing what is still running (SIGKILL)" >&2
        trap - EXIT
        kill_all
        echo "make run: stopped on $stopping, then killed on the second $1" >&2
        exit 130
    fi
    stopping=$1
}
trap 'on_signal Ctrl-C' INT
trap 'on_signal SIGTERM' TERM
trap 'on_signal SIGHUP' HUP
# Any other way out (a failed start-up, set -e, a Ctrl-C during start-up) stops what was
# started, the same way.
on_exit() {
    stop_all
    [ -z "$stopping" ] || echo "make run: stopped on $stopping during start-up" >&2
}
trap on_exit EXIT

# start NAME PORT CMD...: runs CMD in a session of its own (so a terminal's Ctrl-C does not
# reach it) in the background, its stdout also copied to $DATA/NAME.stdout, and waits until it
# prints its address (a service's "listening on" line, printed once bound and past its
# start-up warnings; the fake server's base URL).
start() {
    local name=$1 port=$2; shift 2
    local out="$DATA/$name.stdout"
    : >"$out"
    # tee too in a session of its own: a Ctrl-C must not cut the service's stdout.
    setsid "$@" > >(exec setsid tee "$out") &
    local pid=$!
    pid_of[$name]=$pid
    for _ in $(seq 1 300); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "make run: $name exited during start-up (see its message above)" >&2
            exit 1
        fi
        [ -z "$stopping" ] || exit 0
        if grep -q "127.0.0.1:$port" "$out"; then return 0; fi
        sleep 0.1
    done
    echo "make run: $name did not listen on 127.0.0.1:$port within 30 s" >&2
    exit 1
}

# The audio cache and the reference clips live in the run dir's blob store (VOXPOOL_BLOB_STORE
# overrides it): the catalog writes clips there (seed, AddReference), synthesis reads them.
mkdir -p "$DATA/blobs"
export VOXPOOL_BLOB_STORE="${VOXPOOL_BLOB_STORE:-file://$DATA/blobs}"
"$BIN/voxpool-catalog" --database "$DB" migrate
"$BIN/voxpool-catalog" --database "$DB" --config "$CONFIG" seed deploy/config/packs.toml
# A fresh dev stack holds no leases that could re-register: no recovery window at start-up.
export VOXPOOL_SCHEDULER__RECOVERY_WINDOW_MS=${VOXPOOL_SCHEDULER__RECOVERY_WINDOW_MS:-0}
# The zero-shot pool's server: a fake speaking vLLM-Omni's wire format (it checks the reference
# clip arrives inline and answers a tone), 4 syntheses at a time. Its death stops nothing.
start fake-gpu-server "$VOXPOOL_PORT_GPU_SERVER" "$BIN/voxpool-fake-vendor" --vendor selfhosted-vllm-omni \
    --listen "127.0.0.1:$VOXPOOL_PORT_GPU_SERVER" --cap 4 --latency-ms 300
echo "${pid_of[fake-gpu-server]}" >"$DATA/fake-gpu-server.pid"
# The elevenlabs-clones pool's vendor: a fake ElevenLabs whose two keys share one workspace with
# 3 clone slots, cloning at once (instant voice clones are ready when created) and counting its
# clone calls (GET /_fake/stats/clones). Its death stops nothing either.
start fake-elevenlabs "$VOXPOOL_PORT_ELEVENLABS" "$BIN/voxpool-fake-vendor" --vendor elevenlabs \
    --listen "127.0.0.1:$VOXPOOL_PORT_ELEVENLABS" --cap 4 --latency-ms 100 --tone-ms 1500 --clone-slots 3 \
    --clone-scope "$VOXPOOL_FAKE_ELEVENLABS_KEY_1=workspace-1" --clone-scope "$VOXPOOL_FAKE_ELEVENLABS_KEY_2=workspace-1"
# The jobs queue and the usage stream: one redis-server of the stack's own, started before the
# catalog and synthesis (synthesis writes usage records to it, the catalog consumes them into
# its ledger: `voxctl usage`). Without redis-server neither jobs nor the ledger run.
usage_store=()
if [ -z "$jobs_skipped" ]; then
    # The jobs queue: its own redis-server, persistent (append-only file under $DATA/redis) so
    # queued jobs survive a restart of the stack. Redis prints no address line, so it is ready
    # once it answers on its port.
    mkdir -p "$DATA/redis"
    setsid redis-server --port "$VOXPOOL_PORT_JOBS_REDIS" --bind 127.0.0.1 --save '' --appendonly yes \
        --dir "$DATA/redis" --loglevel warning &
    pid_of[jobs-redis]=$!
    watched[$!]=jobs-redis
    for i in $(seq 1 300); do
        if ! kill -0 "${pid_of[jobs-redis]}" 2>/dev/null; then
            echo "make run: jobs-redis exited during start-up (see its message above)" >&2
            exit 1
        fi
        if (exec 3<>"/dev/tcp/127.0.0.1/$VOXPOOL_PORT_JOBS_REDIS") 2>/dev/null; then break; fi
        if [ "$i" = 300 ]; then echo "make run: jobs-redis did not listen on 127.0.0.1:$VOXPOOL_PORT_JOBS_REDIS within 30 s" >&2; exit 1; fi
        sleep 0.1
    done
    usage_store=(--usage-store "redis://127.0.0.1:$VOXPOOL_PORT_JOBS_REDIS")
fi
start scheduler "$VOXPOOL_PORT_SCHEDULER" "$BIN/voxpool-scheduler" --config "$CONFIG" --store memory \
    --listen "127.0.0.1:$VOXPOOL_PORT_SCHEDULER"
watched[${pid_of[scheduler]}]=scheduler
start catalog "$VOXPOOL_PORT_CATALOG" "$BIN/voxpool-catalog" --database "$DB" --config "$CONFIG" \
    --listen "127.0.0.1:$VOXPOOL_PORT_CATALOG" "${usage_store[@]}"
watched[${pid_of[catalog]}]=catalog
start synthesis "$VOXPOOL_PORT_SYNTHESIS" env VOXPOOL_CLIENT_TOKEN="$VOXPOOL_CLIENT_TOKEN_SYNTHESIS" \
    "$BIN/voxpool-synthesis" --config "$CONFIG" --listen "127.0.0.1:$VOXPOOL_PORT_SYNTHESIS" \
    --scheduler "http://127.0.0.1:$VOXPOOL_PORT_SCHEDULER" --catalog "http://127.0.0.1:$VOXPOOL_PORT_CATALOG" \
    --http-listen "127.0.0.1:$VOXPOOL_PORT_HTTP" "${usage_store[@]}"
watched[${pid_of[synthesis]}]=synthesis
# Its last start-up line is the HTTP front's URL, printed right after the gRPC address.
for _ in $(seq 1 50); do
    grep -q "http front on http://127.0.0.1:$VOXPOOL_PORT_HTTP" "$DATA/synthesis.stdout" && break
    sleep 0.1
done
jobs_ready="jobs not started (see the warning above)"
if [ -z "$jobs_skipped" ]; then
    start jobs "$VOXPOOL_PORT_JOBS" env VOXPOOL_CLIENT_TOKEN="$VOXPOOL_CLIENT_TOKEN_JOBS" \
        "$BIN/voxpool-jobs" --listen "127.0.0.1:$VOXPOOL_PORT_JOBS" --store "redis://127.0.0.1:$VOXPOOL_PORT_JOBS_REDIS" \
        --synthesis "http://127.0.0.1:$VOXPOOL_PORT_SYNTHESIS" --blob-store "$VOXPOOL_BLOB_STORE" --config "$CONFIG"
    watched[${pid_of[jobs]}]=jobs
    jobs_ready="jobs 127.0.0.1:$VOXPOOL_PORT_JOBS (queue: redis-server 127.0.0.1:$VOXPOOL_PORT_JOBS_REDIS)"
fi
# The browser console, in front of the four services (their public APIs only); the client
# token of voxctl, which every data-plane service accepts.
console_jobs=()
[ -z "$jobs_skipped" ] && console_jobs=(--jobs "http://127.0.0.1:$VOXPOOL_PORT_JOBS")
start console "$VOXPOOL_PORT_CONSOLE" env VOXPOOL_CLIENT_TOKEN="$VOXPOOL_CLIENT_TOKEN_VOXCTL" \
    "$BIN/voxpool-console" --listen "127.0.0.1:$VOXPOOL_PORT_CONSOLE" \
    --scheduler "http://127.0.0.1:$VOXPOOL_PORT_SCHEDULER" --catalog "http://127.0.0.1:$VOXPOOL_PORT_CATALOG" \
    --synthesis "http://127.0.0.1:$VOXPOOL_PORT_SYNTHESIS" "${console_jobs[@]}"
watched[${pid_of[console]}]=console
echo "voxpool running: scheduler 127.0.0.1:$VOXPOOL_PORT_SCHEDULER, catalog 127.0.0.1:$VOXPOOL_PORT_CATALOG, synthesis 127.0.0.1:$VOXPOOL_PORT_SYNTHESIS (OpenAI-compatible HTTP: http://127.0.0.1:$VOXPOOL_PORT_HTTP/v1), $jobs_ready, fake GPU server 127.0.0.1:$VOXPOOL_PORT_GPU_SERVER (pid ${pid_of[fake-gpu-server]}: make gpu-server-stop stops it), fake ElevenLabs 127.0.0.1:$VOXPOOL_PORT_ELEVENLABS"
echo "console: http://127.0.0.1:$VOXPOOL_PORT_CONSOLE/login (sign in with \$VOXPOOL_ADMIN_TOKEN to act, or \$VOXPOOL_CONSOLE_TOKEN, default dev-console-token-local, to look)"
echo "run dir: $DATA (the catalog's SQLite file, the blob store, the jobs Redis, each process's stdout)"
echo "admin token: \$VOXPOOL_ADMIN_TOKEN (default dev-admin-token-local). Ctrl-C stops everything: calls in flight finish first; Ctrl-C again kills at once."
echo "client token: \$VOXPOOL_CLIENT_TOKEN_VOXCTL (default dev-client-token-voxctl): export VOXPOOL_CLIENT_TOKEN=\$VOXPOOL_CLIENT_TOKEN_VOXCTL for voxctl"
echo "http api key: \$VOXPOOL_HTTP_API_KEY (default dev-http-key-local): the OpenAI client's api_key for http://127.0.0.1:$VOXPOOL_PORT_HTTP/v1"

set +e
status=0
dead=""
while [ -z "$stopping" ]; do
    # Returns when a watched process exits, or (status > 128) when a signal was trapped.
    wait -n -p dead "${!watched[@]}"
    status=$?
    [ -n "${dead:-}" ] && break
done
if [ -n "$stopping" ] && [ -z "${dead:-}" ]; then
    echo "make run: $stopping: stopping the stack (console, jobs, synthesis, catalog and scheduler, then Redis and the fake vendors); calls in flight finish first, $stopping again kills at once" >&2
    asked=$EPOCHREALTIME
    trap - EXIT
    stop_all
    echo "make run: stopped on $stopping; every process exited in $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $asked }") s" >&2
    exit 0
fi
name=${watched[$dead]}
unset "pid_of[$name]"
if [ "$status" -eq 0 ]; then
    echo "make run: $name exited (status 0) though nobody asked the stack to stop; stopping the others" >&2
else
    echo "make run: $name stopped unexpectedly (exit status $status; its log lines are above); stopping the others" >&2
fi
trap - EXIT
stop_all
[ "$status" -eq 0 ] && status=1
exit "$status"
