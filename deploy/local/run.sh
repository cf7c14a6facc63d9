#!/usr/bin/env bash
# `make run`: scheduler (in-process store), catalog (SQLite, seeded with deploy/config/packs.toml)
# and synthesis (local espeak-ng engine) on their default ports, with the example config.
# Ctrl-C stops all three.
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=${CARGO_TARGET_DIR:-target}/debug
CONFIG=${VOXPOOL_CONFIG:-deploy/config/example.toml}
DATA=${VOXPOOL_RUN_DIR:-target/run}
mkdir -p "$DATA"
export VOXPOOL_ADMIN_TOKEN=${VOXPOOL_ADMIN_TOKEN:-dev-admin-token}
DB="sqlite://$PWD/$DATA/voxpool.db?mode=rwc"

command -v espeak-ng >/dev/null || echo "warning: espeak-ng not found (apt-get install espeak-ng): synthesis will fail" >&2

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

"$BIN/voxpool-scheduler" --config "$CONFIG" --store memory &
pids+=($!)
if [ -x "$BIN/voxpool-catalog" ]; then
    "$BIN/voxpool-catalog" --database "$DB" migrate
    "$BIN/voxpool-catalog" --database "$DB" seed deploy/config/packs.toml
    "$BIN/voxpool-catalog" --database "$DB" &
    pids+=($!)
fi
if [ -x "$BIN/voxpool-synthesis" ]; then
    "$BIN/voxpool-synthesis" --config "$CONFIG" &
    pids+=($!)
fi
echo "voxpool running: scheduler 127.0.0.1:50051, catalog 127.0.0.1:50052, synthesis 127.0.0.1:50053"
echo "admin token: \$VOXPOOL_ADMIN_TOKEN (default dev-admin-token). Ctrl-C stops everything."
wait -n "${pids[@]}"
