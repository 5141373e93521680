#!/usr/bin/env bash
# Fine-tune the MiniLM-based encoders on a GPU machine: a small grid per data set, each run early-stopped on
# dev, the dev-best run of each data set kept (test figures are printed for every run but never used to choose).
#
#   python -m experiments.checkpoint_delta base16 .gpu/minilm16      # once, on a machine with the package
#   GRID=fusion|in-batch bash scripts/gpu/finetune_minilm.sh OUT [DATA_DIR]   # on the GPU machine
#
# Each run is cut at RUN_SECONDS (default 470). OUT/summary.tsv lists every run (data set, name, dev MAP, test MAP); OUT/<data>-best.tar.part-* is the dev-best
# checkpoint of each data set as a delta over .gpu/minilm16 (python -m experiments.checkpoint_delta read).
# The MiniLM base is the float16 copy (the GPU machine takes 64 MB at most; the package's float32 file is 91 MB),
# loaded as float32 on both machines, so the checkpoint rebuilt here is the one trained there.
set -euo pipefail
py=${PYTHON:-python3}
out=${1:?usage: finetune_minilm.sh OUT [DATA_DIR]}
data=${2:-../shared/data}
runs=/tmp/semdup-gpu-runs
mkdir -p "$out" "$runs"
base=(--device cuda --threads 2 --data-dir "$data" --set model_dir=.gpu/minilm16 --evals-per-epoch "${EVALS:-2}")

run() {  # run NAME ARGS...: one training run, its log in OUT/logs
    local name=$1
    shift
    timeout "${RUN_SECONDS:-470}" "$py" -m semdup train "$@" "${base[@]}" --out "$runs/$name" >"$runs/$name.log" 2>&1 || echo "run $name FAILED (see its log)"
}

case "${GRID:-fusion}" in
fusion)  # bow-MiniLM (the BOW-CNN fusion with MiniLM as its dense path) and MiniLM, each arch's own loss
    # SemEval-2016 (train part 1 + 2 / dev / test): bow-MiniLM without the CPU step cap.
    run semeval-f4-lr2e5-len128 --arch bow-minilm --data semeval --epochs 3 --set freeze_layers=4 --lr 2e-5 --set max_len=128 &
    run semeval-f2-lr2e5-len256 --arch bow-minilm --data semeval --epochs 3 --set freeze_layers=2 --lr 2e-5 --set max_len=256 &
    run semeval-f4-lr5e5-len256 --arch bow-minilm --data semeval --epochs 3 --set freeze_layers=4 --lr 5e-5 --set max_len=256 &
    run semeval-f2-lr1e5-len256 --arch bow-minilm --data semeval --epochs 3 --set freeze_layers=2 --lr 1e-5 --set max_len=256 &
    # Travel Stack Exchange (its train / dev / test splits): bow-MiniLM and MiniLM alone.
    run travel-bow-f2-lr2e5 --arch bow-minilm --data travel --epochs 2 --set freeze_layers=2 --lr 2e-5 --set max_len=256 --dense-scales 0.5,1,2 &
    run travel-bow-f4-lr2e5 --arch bow-minilm --data travel --epochs 2 --set freeze_layers=4 --lr 2e-5 --set max_len=256 --dense-scales 0.5,1,2 &
    run travel-bow-f2-lr5e5 --arch bow-minilm --data travel --epochs 2 --set freeze_layers=2 --lr 5e-5 --set max_len=256 --dense-scales 0.5,1,2 &
    run travel-minilm-f2-lr2e5 --arch minilm --data travel --epochs 2 --set freeze_layers=2 --lr 2e-5 --set max_len=256 &
    ;;
in-batch)  # MiniLM with the loss it was pre-trained with: softmax over every candidate of the batch
    ib=(--arch minilm --loss in-batch --negatives 1 --set max_len=256)
    run semeval-ib-b32-f2-lr2e5 "${ib[@]}" --data semeval --epochs 3 --batch-size 32 --set freeze_layers=2 --lr 2e-5 &
    run semeval-ib-b32-f4-lr1e5 "${ib[@]}" --data semeval --epochs 3 --batch-size 32 --set freeze_layers=4 --lr 1e-5 &
    run travel-ib-b32-f2-lr2e5 "${ib[@]}" --data travel --epochs 2 --batch-size 32 --set freeze_layers=2 --lr 2e-5 &
    run travel-ib-b32-f2-lr5e6 "${ib[@]}" --data travel --epochs 2 --batch-size 32 --set freeze_layers=2 --lr 5e-6 &
    run travel-ib-b64-f2-lr1e5 "${ib[@]}" --data travel --epochs 2 --batch-size 64 --set freeze_layers=2 --lr 1e-5 &
    run travel-ib-b32-f4-lr2e5 "${ib[@]}" --data travel --epochs 2 --batch-size 32 --set freeze_layers=4 --lr 2e-5 &
    ;;
*)
    echo "unknown GRID=${GRID}; known: fusion, in-batch" >&2
    exit 2
    ;;
esac
wait

"$py" - "$runs" "$out" <<'PY'
import json, sys
from pathlib import Path
runs, out = Path(sys.argv[1]), Path(sys.argv[2])
rows, best = [], {}
for m in sorted(runs.glob("*/metrics.json")):
    got = json.loads(m.read_text())
    name = m.parent.name
    data = name.split("-")[0]
    dev, test = got.get("best_dev_MAP"), (got.get("test") or {}).get("MAP")
    rows.append(f"{data}\t{name}\t{dev:.2f}\t{test if test is None else round(test, 2)}")
    if data not in best or dev > best[data][1]:
        best[data] = (name, dev)
(out / "summary.tsv").write_text("data\trun\tdev_MAP\ttest_MAP\n" + "\n".join(rows) + "\n")
(runs / "best.txt").write_text("".join(f"{d}\t{n}\n" for d, (n, _) in best.items()))
print((out / "summary.tsv").read_text())
PY
while read -r data name; do
    "$py" -m experiments.checkpoint_delta write "$runs/$name" "$runs/$data-best"
    echo "$name" >"$runs/$data-best/run.txt"
    tar -C "$runs" -cf - "$data-best" | split -b 15m - "$out/$data-best.tar.part-"
done <"$runs/best.txt"
tar -C "$runs" -czf "$out/logs.tgz" --exclude='*.pt' --exclude='*-best' .
ls -la "$out"
