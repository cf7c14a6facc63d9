#!/usr/bin/env bash
# `make run`: scheduler (in-process store), catalog (SQLite, seeded with deploy/config/packs.toml),
# synthesis (local espeak-ng engine) and jobs (with its own redis-server for the queue, when
# redis-server is installed) on their default ports, with the example config, plus a fake GPU
# server for the zero-shot pool. Ctrl-C stops them all; if one of the services (or the jobs
# queue's redis-server) dies, the others are stopped too and its name is said. The fake GPU
# server may die (kill it to see a server fail): the stack stays up, and it can be started
# again by hand.
# Ports taken by another process (a second `make run`) are named before anything starts, and
# the ready line is printed only once every service has said it listens, so it comes last.
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=${CARGO_TARGET_DIR:-target}/debug
CONFIG=${VOXPOOL_CONFIG:-deploy/config/example.toml}
DATA=${VOXPOOL_RUN_DIR:-target/run}
mkdir -p "$DATA"
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
# `Authorization: Bearer <key>` to the HTTP front on 127.0.0.1:8080.
export VOXPOOL_HTTP_API_KEY=${VOXPOOL_HTTP_API_KEY:-dev-http-key-local}
# The secret jobs sign their webhooks with (voxctl job submit --webhook-url).
export VOXPOOL_JOBS_WEBHOOK_SECRET=${VOXPOOL_JOBS_WEBHOOK_SECRET:-dev-webhook-secret-local}
DB="sqlite://$(realpath -m "$DATA")/voxpool.db?mode=rwc"

# The jobs service keeps its queue in a redis-server of its own: without one (or without the
# binary) the rest of the stack runs and jobs is left out, with the reason.
jobs_skipped=""
if ! command -v redis-server >/dev/null; then
    jobs_skipped="redis-server not found (apt-get install redis-server): the jobs service is not started (its queue lives in Redis); the rest of the stack runs"
elif [ ! -x "$BIN/voxpool-jobs" ]; then
    jobs_skipped="$BIN/voxpool-jobs not built (make build): the jobs service is not started; the rest of the stack runs"
fi
ports="scheduler:50051 catalog:50052 synthesis:50053 synthesis-http:8080 fake-gpu-server:50071"
[ -z "$jobs_skipped" ] && ports="$ports jobs:50054 jobs-redis:50079"

taken=()
for spec in $ports; do
    if (exec 3<>"/dev/tcp/127.0.0.1/${spec#*:}") 2>/dev/null; then taken+=("$spec"); fi
done
if [ ${#taken[@]} -gt 0 ]; then
    for spec in "${taken[@]}"; do
        echo "make run: port ${spec#*:} (the ${spec%%:*}'s) is taken by another process: a make run still running, or see \`ss -ltnp 'sport = :${spec#*:}'\`; stop it first" >&2
    done
    exit 1
fi

command -v espeak-ng >/dev/null || echo "warning: espeak-ng not found (apt-get install espeak-ng): synthesis will fail" >&2
[ -z "$jobs_skipped" ] || echo "warning: $jobs_skipped" >&2

declare -A names=()
# Started like the services, but its death is no reason to stop the stack.
extras=()
cleanup() { kill "${!names[@]}" "${extras[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
# Ctrl-C / SIGTERM: the user stops the stack, which is a success.
trap 'exit 0' INT TERM

# start NAME PORT CMD...: runs CMD in the background (its stdout also copied to
# $DATA/NAME.stdout) and waits until it prints its address (a service's "listening on" line,
# printed once bound and past its start-up warnings; the fake server's base URL).
start() {
    local name=$1 port=$2; shift 2
    local out="$DATA/$name.stdout"
    : >"$out"
    "$@" > >(tee "$out") &
    local pid=$!
    names[$pid]=$name
    for _ in $(seq 1 300); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "make run: $name exited during start-up (see its message above)" >&2
            exit 1
        fi
        if grep -q "127.0.0.1:$port" "$out"; then return 0; fi
        sleep 0.1
    done
    echo "make run: $name did not listen on 127.0.0.1:$port within 30 s" >&2
    exit 1
}

# The audio cache and the reference clips live in the run dir's blob store (VOXPOOL_BLOB_STORE
# overrides it): the catalog writes clips there (seed, AddReference), synthesis reads them.
mkdir -p "$DATA/blobs"
export VOXPOOL_BLOB_STORE="${VOXPOOL_BLOB_STORE:-file://$(cd "$DATA/blobs" && pwd)}"
"$BIN/voxpool-catalog" --database "$DB" migrate
"$BIN/voxpool-catalog" --database "$DB" --pools-config "$CONFIG" seed deploy/config/packs.toml
# A fresh dev stack holds no leases that could re-register: no recovery window at start-up.
export VOXPOOL_SCHEDULER__RECOVERY_WINDOW_MS=${VOXPOOL_SCHEDULER__RECOVERY_WINDOW_MS:-0}
# The zero-shot pool's server: a fake speaking vLLM-Omni's wire format (it checks the reference
# clip arrives inline and answers a tone), 4 syntheses at a time.
start fake-gpu-server 50071 "$BIN/voxpool-fake-vendor" --vendor selfhosted-vllm-omni \
    --listen 127.0.0.1:50071 --cap 4 --latency-ms 300
for pid in "${!names[@]}"; do
    if [ "${names[$pid]}" = fake-gpu-server ]; then extras+=("$pid"); unset "names[$pid]"; fi
done
start scheduler 50051 "$BIN/voxpool-scheduler" --config "$CONFIG" --store memory
start catalog 50052 "$BIN/voxpool-catalog" --database "$DB" --pools-config "$CONFIG"
start synthesis 50053 env VOXPOOL_CLIENT_TOKEN="$VOXPOOL_CLIENT_TOKEN_SYNTHESIS" \
    "$BIN/voxpool-synthesis" --config "$CONFIG" --http-listen 127.0.0.1:8080
# Its last start-up line is the HTTP front's URL, printed right after the gRPC address.
for _ in $(seq 1 50); do
    grep -q "http front on http://127.0.0.1:8080" "$DATA/synthesis.stdout" && break
    sleep 0.1
done
jobs_ready="jobs not started (see the warning above)"
if [ -z "$jobs_skipped" ]; then
    # The jobs queue: its own redis-server, persistent (append-only file under $DATA/redis) so
    # queued jobs survive a restart of the stack. Redis prints no address line, so it is ready
    # once it answers on its port.
    mkdir -p "$DATA/redis"
    redis-server --port 50079 --bind 127.0.0.1 --save '' --appendonly yes --dir "$(cd "$DATA/redis" && pwd)" \
        --loglevel warning &
    names[$!]=jobs-redis
    for i in $(seq 1 300); do
        if ! kill -0 "$!" 2>/dev/null; then
            echo "make run: jobs-redis exited during start-up (see its message above)" >&2
            exit 1
        fi
        if (exec 3<>/dev/tcp/127.0.0.1/50079) 2>/dev/null; then break; fi
        if [ "$i" = 300 ]; then echo "make run: jobs-redis did not listen on 127.0.0.1:50079 within 30 s" >&2; exit 1; fi
        sleep 0.1
    done
    start jobs 50054 env VOXPOOL_CLIENT_TOKEN="$VOXPOOL_CLIENT_TOKEN_JOBS" \
        "$BIN/voxpool-jobs" --listen 127.0.0.1:50054 --store redis://127.0.0.1:50079 \
        --synthesis http://127.0.0.1:50053 --blob-store "$VOXPOOL_BLOB_STORE" --config "$CONFIG"
    jobs_ready="jobs 127.0.0.1:50054 (queue: redis-server 127.0.0.1:50079)"
fi
echo "voxpool running: scheduler 127.0.0.1:50051, catalog 127.0.0.1:50052, synthesis 127.0.0.1:50053 (OpenAI-compatible HTTP: http://127.0.0.1:8080/v1), $jobs_ready, fake GPU server 127.0.0.1:50071"
echo "admin token: \$VOXPOOL_ADMIN_TOKEN (default dev-admin-token-local). Ctrl-C stops everything."
echo "client token: \$VOXPOOL_CLIENT_TOKEN_VOXCTL (default dev-client-token-voxctl): export VOXPOOL_CLIENT_TOKEN=\$VOXPOOL_CLIENT_TOKEN_VOXCTL for voxctl"
echo "http api key: \$VOXPOOL_HTTP_API_KEY (default dev-http-key-local): the OpenAI client's api_key for http://127.0.0.1:8080/v1"
set +e
wait -n -p dead "${!names[@]}"
status=$?
name=$(printf '%s' "${names[$dead]:-a service}")
if [ "$status" -eq 0 ]; then
    # A clean exit: the service was asked to stop (Ctrl-C reaches the whole process group, or
    # someone sent it SIGTERM). Stopping everything is what was wanted.
    echo "make run: $name stopped on request; stopping the others" >&2
    exit 0
fi
echo "make run: $name stopped unexpectedly (exit status $status; its log lines are above); stopping the others" >&2
exit "$status"
