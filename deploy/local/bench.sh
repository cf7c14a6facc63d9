#!/usr/bin/env bash
# `make bench`: runs every benchmark of the workspace (release profile) and writes a dated
# markdown report with the machine description to target/bench-reports/.
set -euo pipefail
cd "$(dirname "$0")/../.."
out_dir=${CARGO_TARGET_DIR:-target}/bench-reports
mkdir -p "$out_dir"
report="$out_dir/$(date -u +%Y-%m-%dT%H%M%SZ).md"
{
    echo "# voxpool benchmarks, $(date -u +'%Y-%m-%d %H:%M UTC')"
    echo
    echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(free -g | awk '/Mem:/{print $2}') GiB RAM, $(uname -sr); $(redis-server --version | cut -d' ' -f1-3); $(rustc --version)"
    echo
} > "$report"
# Benches that drive the real stack look for release binaries next to them.
cargo build --release -p voxpool-scheduler -p voxpool-synthesis -p voxpool-catalog -p voxpool-jobs -p voxctl --bins
# The instruction-count benchmarks save their summaries for the check below.
GUNGRAUN_SAVE_SUMMARY=json cargo bench --workspace --benches -- 2>/dev/null | tee -a "$report"
{
    echo
    echo "## Instruction counts against the committed figures (deploy/local/instructions.sh)"
    echo
} >> "$report"
status=0
deploy/local/instructions.sh --compare | tee -a "$report" || status=$?
echo
echo "report written to $report"
exit "$status"
