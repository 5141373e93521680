#!/usr/bin/env bash
# The GPU check of issue #27, start to finish in under 10 minutes on a GPU machine with no network:
#   (a) the worker's encoding path (index_batch into a null sink) on --posts Travel posts, (b) a torch bf16
#   reference encoder of the same MiniLM in the same run, (c) `semdup learn --data semeval --device cuda` and its
#   test figure. Prints posts/s of (a) and (b), their ratio, the learn wall time and its test MAP / MRR / P@1.
#
#   bash scripts/gpu/check.sh                                   # on the GPU machine, after prepare.sh's parts
#   bash scripts/gpu/check.sh --device cpu --posts 500 --no-learn --bundle B   # the CPU dry run (here, CI's test)
#
# Options: --device cuda|cpu (cuda), --posts N (50000), --workers N (half the cores, at most 8), --task-posts N
# (1000), --bundle DIR (default: the one prepare.sh sent), --learn/--no-learn (default: on with cuda, off with
# cpu; `semdup learn --device` is the learning issue's), --out DIR ($OUT, else .gpu/out).
# On the GPU machine the parts in .gpu/send are checked against their sha256 manifest and unpacked, the wheels
# installed offline into .gpu/venv (system site packages: torch, transformers... come from the machine).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
device=cuda posts=50000 workers="" task_posts=1000 bundle="" learn="" out="${OUT:-.gpu/out}"
while [ $# -gt 0 ]; do
    case "$1" in
    --device) device=$2; shift 2 ;;
    --posts) posts=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --task-posts) task_posts=$2; shift 2 ;;
    --bundle) bundle=$2; shift 2 ;;
    --learn) learn=1; shift ;;
    --no-learn) learn=0; shift ;;
    --out) out=$2; shift 2 ;;
    *) echo "check.sh: unknown option $1 (see the head of scripts/gpu/check.sh)" >&2; exit 2 ;;
    esac
done
case "$device" in cuda|cpu) ;; *) echo "check.sh: --device cuda or cpu, not $device" >&2; exit 2 ;; esac
[ -n "$learn" ] || { [ "$device" = cuda ] && learn=1 || learn=0; }
mkdir -p "$out"
start=$(date +%s)
py=${PYTHON:-python3}

# On the GPU machine (--device cuda) with prepare.sh's parts: join them, install their wheels. A CPU dry run uses
# this environment as it is.
if [ "$device" = cuda ] && [ -f .gpu/send/manifest.json ] && [ ! -f .gpu/stage/.joined ]; then
    "$py" scripts/gpu/pack.py join .gpu/send .gpu/stage
    tar -C .gpu/stage -xzf .gpu/stage/bundle.tar.gz
    mkdir -p .gpu/stage/data && tar -C .gpu/stage/data -xzf .gpu/stage/data.tar.gz
    touch .gpu/stage/.joined
fi
if [ "$device" = cuda ] && [ -d .gpu/stage/wheels ]; then
    if [ -x .gpu/venv/bin/python ] || "$py" -m venv --system-site-packages .gpu/venv 2>/dev/null; then
        [ -f .gpu/venv/.installed ] || { .gpu/venv/bin/python -m pip install -q --no-index --no-deps \
            .gpu/stage/wheels/*.whl && touch .gpu/venv/.installed; }
        py=.gpu/venv/bin/python
    else  # no venv module: the wheels in a folder of their own, first on the path (onnxruntime-gpu shadows the CPU one)
        rm -rf .gpu/venv
        [ -f .gpu/site/.installed ] || { "$py" -m pip install -q --no-index --no-deps --target .gpu/site \
            .gpu/stage/wheels/*.whl && touch .gpu/site/.installed; }
        export PYTHONPATH="$root/.gpu/site${PYTHONPATH:+:$PYTHONPATH}"
    fi
    export SEMDUP_DATA_DIR=${SEMDUP_DATA_DIR:-$root/.gpu/stage/data}
    bundle=${bundle:-.gpu/stage/bundle}
fi
[ -n "$bundle" ] || { echo "check.sh: give --bundle (no bundle came with prepare.sh's parts)" >&2; exit 2; }
if [ "$device" = cuda ]; then  # the CUDA 13 / cuDNN 9 libraries torch's wheels brought, for onnxruntime-gpu
    nv=$("$py" -c 'import nvidia, os; print(" ".join(nvidia.__path__))' 2>/dev/null || true)
    if [ -n "$nv" ]; then
        libs=$(find $nv -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd: -)
        export LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
"$py" -c 'import onnxruntime as o, sys; print("python", sys.version.split()[0], "onnxruntime", o.__version__, o.get_available_providers())'

echo "== (a) the worker's encoding path and (b) the torch reference, $posts posts"
extra=()
[ -n "$workers" ] && extra+=(--workers "$workers")
timeout 270 "$py" -m benchmarks.gpu_check --bundle "$bundle" --device "$device" --posts "$posts" \
    --task-posts "$task_posts" --json-out "$out/gpu_check.json" "${extra[@]}" 2>"$out/gpu_check.log" \
    | tee "$out/gpu_check.txt" || { tail -20 "$out/gpu_check.log" >&2; exit 1; }

if [ "$learn" = 1 ]; then
    echo "== (c) semdup learn --data semeval --device $device"
    t0=$(date +%s%N)
    learned=.gpu/work/learned  # beside $OUT: only the logs and figures come back
    rm -rf "$learned" && mkdir -p .gpu/work
    timeout 150 "$py" -m semdup learn --data semeval --device "$device" --out "$learned" >"$out/learn.log" 2>&1 \
        || { tail -20 "$out/learn.log" >&2; echo "learn: FAILED (its log: $out/learn.log)"; }
    t1=$(date +%s%N)
    echo "learn wall: $(awk "BEGIN { printf \"%.1f\", ($t1 - $t0) / 1e9 }") s"
    if [ -f "$learned/manifest.json" ]; then
        timeout 60 "$py" -m semdup eval semeval --set test --method "bundle:$learned" 2>"$out/eval.log" \
            | tee "$out/eval.txt" || tail -20 "$out/eval.log" >&2
    else
        echo "learn wrote no bundle at $learned: no test figure"
    fi
else
    echo "== (c) learn skipped (--no-learn)"
fi
echo "check.sh: done in $(( $(date +%s) - start )) s"
