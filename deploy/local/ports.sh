# shellcheck shell=bash
# `make run`'s ports and run directory: the one place they are named (sourced by run.sh and
# gpu-server.sh). Set any of these in the environment to move that process; the README's
# walk-throughs read the same variables, with the same defaults. A second stack beside the
# first needs all nine ports and its own run directory, e.g.
#
#   VOXPOOL_RUN_DIR=/tmp/stack2 VOXPOOL_PORT_SCHEDULER=51051 VOXPOOL_PORT_CATALOG=51052 \
#   VOXPOOL_PORT_SYNTHESIS=51053 VOXPOOL_PORT_HTTP=8081 VOXPOOL_PORT_JOBS=51054 \
#   VOXPOOL_PORT_JOBS_REDIS=51079 VOXPOOL_PORT_GPU_SERVER=51071 VOXPOOL_PORT_ELEVENLABS=51072 \
#   VOXPOOL_PORT_CONSOLE=8091 make run
: "${VOXPOOL_PORT_SCHEDULER:=50051}"   # PoolScheduler (gRPC)
: "${VOXPOOL_PORT_CATALOG:=50052}"     # VoiceCatalog (gRPC)
: "${VOXPOOL_PORT_SYNTHESIS:=50053}"   # Synthesis (gRPC)
: "${VOXPOOL_PORT_HTTP:=8080}"         # synthesis's OpenAI-compatible HTTP front (/v1)
: "${VOXPOOL_PORT_JOBS:=50054}"        # Jobs (gRPC)
: "${VOXPOOL_PORT_JOBS_REDIS:=50079}"  # the jobs queue's own redis-server
: "${VOXPOOL_PORT_GPU_SERVER:=50071}"  # the fake vLLM-Omni GPU server (pool gpu-zero-shot)
: "${VOXPOOL_PORT_ELEVENLABS:=50072}"  # the fake ElevenLabs that clones voices (pool elevenlabs-clones)
: "${VOXPOOL_PORT_CONSOLE:=8090}"      # the browser console (voxpool-console, docs/CONSOLE.md)
# The stack's data (SQLite catalog, blob store with the audio cache and clips, the jobs Redis,
# each process's stdout): outside target/, so `cargo clean` leaves it.
: "${VOXPOOL_RUN_DIR:=${XDG_DATA_HOME:-$HOME/.local/share}/voxpool/run}"
export VOXPOOL_PORT_SCHEDULER VOXPOOL_PORT_CATALOG VOXPOOL_PORT_SYNTHESIS VOXPOOL_PORT_HTTP \
    VOXPOOL_PORT_JOBS VOXPOOL_PORT_JOBS_REDIS VOXPOOL_PORT_GPU_SERVER VOXPOOL_PORT_ELEVENLABS \
    VOXPOOL_PORT_CONSOLE VOXPOOL_RUN_DIR
