#!/usr/bin/env bash
# The instruction-count check of `make bench` (docs/BENCHMARKS.md, "Instruction counts"):
# compares each hot path's instructions (callgrind's Ir, from the gungraun benchmarks
# `services/{scheduler,synthesis}/benches/instructions.rs`) with the figure committed in that
# crate's `benches/instructions.toml`, and fails when one rose more than LIMIT_PCT (5) %.
#
#   deploy/local/instructions.sh            run both benchmarks, then compare
#   deploy/local/instructions.sh --compare  compare the last run's summaries only (`make bench`
#                                           ran them with GUNGRAUN_SAVE_SUMMARY=json)
#   deploy/local/instructions.sh --update   run both, then write their counts as the committed
#                                           figures (after a change that is meant to cost more,
#                                           or that saved instructions)
set -euo pipefail
cd "$(dirname "$0")/../.."
limit_pct=${LIMIT_PCT:-5}
crates=(scheduler synthesis)
target=${CARGO_TARGET_DIR:-target}

mode=run
case "${1:-}" in
    "") ;;
    --compare) mode=compare ;;
    --update) mode=update ;;
    *) echo "usage: $0 [--compare|--update]" >&2; exit 2 ;;
esac

if [ "$mode" != compare ]; then
    for crate in "${crates[@]}"; do
        # Old summaries of a benchmark since removed must not be read as this run's.
        rm -rf "$target/gungraun/voxpool-$crate/instructions"
        GUNGRAUN_SAVE_SUMMARY=json cargo bench -q -p "voxpool-$crate" --bench instructions
    done
fi

# `<crate>::<function>.<id> <Ir>` for every summary of the last run, sorted.
measured() {
    local crate=$1
    find "$target/gungraun/voxpool-$crate/instructions" -name summary.json -print0 2>/dev/null \
        | xargs -0 -r jq -r '"\(.function_name).\(.id // "-") \(.profiles[0].data.total.metrics.Ir.values.new)"' \
        | sed "s/^/$crate::/" | sort
}

status=0
printf '| benchmark | committed Ir | this run | change |\n|---|---:|---:|---:|\n'
for crate in "${crates[@]}"; do
    committed="services/$crate/benches/instructions.toml"
    now=$(measured "$crate")
    if [ -z "$now" ]; then
        echo "instructions: no summary of voxpool-$crate's instruction benchmark under $target/gungraun (run it first)" >&2
        exit 1
    fi
    if [ "$mode" = update ]; then
        {
            echo "# Instructions (callgrind Ir) of one call of each hot path: services/$crate/benches/instructions.rs."
            echo "# deploy/local/instructions.sh fails when a run counts more than 5 % over these;"
            echo "# \`deploy/local/instructions.sh --update\` rewrites them (docs/BENCHMARKS.md)."
            echo "$now" | awk '{ printf "\"%s\" = %s\n", $1, $2 }'
        } > "$committed"
    fi
    while read -r name ir; do
        was=$(sed -n "s/^\"$name\" = \([0-9]*\)$/\1/p" "$committed" 2>/dev/null)
        if [ -z "$was" ]; then
            printf '| %s | (none) | %s | no committed figure yet: commit one with --update |\n' "$name" "$ir"
            continue
        fi
        verdict=$(awk -v now="$ir" -v was="$was" -v limit="$limit_pct" 'BEGIN {
            pct = (now - was) * 100 / was
            printf "%+.1f %%%s", pct, (pct > limit ? " REGRESSION (over +" limit " %)" : "") }')
        printf '| %s | %s | %s | %s |\n' "$name" "$was" "$ir" "$verdict"
        case "$verdict" in *REGRESSION*) status=1 ;; esac
    done <<< "$now"
done
if [ "$status" != 0 ]; then
    echo "instructions: a hot path costs more than LIMIT_PCT ($limit_pct) % over its committed figure; see above" >&2
fi
exit "$status"
