#!/usr/bin/env bash
# `make gpu-server-stop` / `make gpu-server-start`: stops, or starts again, the fake GPU server
# of the `make run` stack that uses this run dir (deploy/local/ports.sh), by the pid that stack
# keeps in its run dir, never by name. One started again here is stopped with the stack.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=deploy/local/ports.sh
. deploy/local/ports.sh
BIN=${CARGO_TARGET_DIR:-target}/debug
DATA=$VOXPOOL_RUN_DIR
pidfile="$DATA/fake-gpu-server.pid"

stack=$(cat "$DATA/run.pid" 2>/dev/null || true)
if [ -z "$stack" ] || ! grep -qa run.sh "/proc/$stack/cmdline" 2>/dev/null; then
    echo "gpu-server: no make run is running with the run dir $DATA (VOXPOOL_RUN_DIR)" >&2
    exit 1
fi
pid=$(cat "$pidfile" 2>/dev/null || true)
running=""
if [ -n "$pid" ] && grep -qa voxpool-fake-vendor "/proc/$pid/cmdline" 2>/dev/null; then running=$pid; fi

case "${1:-}" in
stop)
    if [ -z "$running" ]; then
        echo "gpu-server: the fake GPU server is not running" >&2
        exit 0
    fi
    kill -TERM "$running"
    while kill -0 "$running" 2>/dev/null; do sleep 0.1; done
    echo "gpu-server: stopped the fake GPU server (pid $running) on 127.0.0.1:$VOXPOOL_PORT_GPU_SERVER; make gpu-server-start starts it again"
    ;;
start)
    if [ -n "$running" ]; then
        echo "gpu-server: the fake GPU server already runs (pid $running)" >&2
        exit 0
    fi
    # In a session of its own, its output in the run dir; the stack (pid $stack) stops it.
    setsid "$BIN/voxpool-fake-vendor" --vendor selfhosted-vllm-omni \
        --listen "127.0.0.1:$VOXPOOL_PORT_GPU_SERVER" --cap 4 --latency-ms 300 \
        </dev/null >>"$DATA/fake-gpu-server.stdout" 2>&1 &
    echo $! >"$pidfile"
    for _ in $(seq 1 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$VOXPOOL_PORT_GPU_SERVER") 2>/dev/null; then
            echo "gpu-server: the fake GPU server runs again on 127.0.0.1:$VOXPOOL_PORT_GPU_SERVER (pid $!); the stack stops it with the rest"
            exit 0
        fi
        kill -0 $! 2>/dev/null || break
        sleep 0.1
    done
    echo "gpu-server: the fake GPU server did not start (see $DATA/fake-gpu-server.stdout)" >&2
    exit 1
    ;;
*)
    echo "usage: $0 stop|start" >&2
    exit 2
    ;;
esac
