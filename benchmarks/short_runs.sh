#!/usr/bin/env bash
# A short run of every benchmark in docs/benchmarks.md: do they still run? Tiny sizes, no figures to keep (each
# one's output is in $OUT/NAME.out, its log in NAME.err). Run from the repository root with the venv on PATH:
#
#     B=artifacts/demo/default-minilm-travel bash benchmarks/short_runs.sh     # B: the demo's Travel default
#
# The embedded OpenSearch and Redis are started (`semdup opensearch|broker start`) unless SEMDUP_OPENSEARCH_URL /
# SEMDUP_BROKER_URL are set; several benchmarks start nodes of their own beside them. About 20 minutes on 2 cores.
set -u
B=${B:?set B to a MiniLM default bundle (bash scripts/demo.sh builds artifacts/demo/default-minilm-travel)}
OUT=${OUT:-$(mktemp -d -t semdup-bench-short-XXXX)}
export SEMDUP_OPENSEARCH_URL=${SEMDUP_OPENSEARCH_URL:-$(semdup opensearch start | tail -1)}
export SEMDUP_BROKER_URL=${SEMDUP_BROKER_URL:-$(semdup broker start | tail -1)}
failed=0
run() {
    local name=$1; shift
    local start=$SECONDS
    timeout 900 python -m "benchmarks.$name" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
    local rc=$?
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
    echo "$name rc=$rc $((SECONDS - start))s :: python -m benchmarks.$name $*"
}
run encoding_ratio --bundle "$B" --posts 64 --round-posts 32
run ingest_profile --bundle "$B" --posts 64 --batch 32
run indexing --bundle "$B" --posts 200 --runs 1
run query_profile --bundle "$B" --queries 5 --rounds 1 --warmup 1
run rerank_latency --bundle "$B" --queries 5 --rounds 1 --warmup 1 --threads 0
run footprint --bundle "$B" --posts 200 --queries 5 --rounds 1 --warmup 1
run freshness --bundle "$B" --posts 100 --writes 4 --timeout 120
run similar_latency --bundle "$B" --rounds 1 --warmup 1 --no-quality
run service_load --bundle "$B" --posts 200 --queries 5 --callers 2 --calls 3 --rounds 1
run ledger_cost --runs 1
run reliability --bundle "$B" --posts 64 --only "no fault"
run neural_search_peer --bundle "$B" --posts 100 --queries 5 --rounds 1 --allow-load --json
run gpu_check --bundle "$B" --device cpu --posts 64
if semdup train --arch bow-cnn --data travel --epochs 1 --max-steps 20 --out "$OUT/bow-cnn" >"$OUT/train.out" 2>&1; then
    run encoder_throughput --checkpoint "$OUT/bow-cnn" --posts 500 --workers 1 --batch 64
else
    failed=$((failed + 1)); echo "encoder_throughput: its BOW-CNN checkpoint could not be trained ($OUT/train.out)"
fi
echo "$failed failed; outputs in $OUT"
[ "$failed" -eq 0 ]
