#!/usr/bin/env bash
# The GPU check, about 5 minutes on a machine with an NVIDIA GPU and no internet: the engine sweep with
# CUDA on both reference models (the model alone, with I/O binding, at each batch size, and its device
# memory), a drain of the whole service through the local broker at each size, then one table per model of
# the model alone against the service. Exits non-zero when CUDA was not actually used.
#
#   scripts/gpu-check.sh                       # from the repository root, after `make venv`
#   WHEELS=/path/to/wheels scripts/gpu-check.sh  # install onnxruntime-gpu[cuda,cudnn] from there first
#
# Offline: on a machine with internet, `pip download 'onnxruntime-gpu[cuda,cudnn]' nvidia-ml-py -d wheels`
# (about 255 MB for onnxruntime-gpu, and NVIDIA's CUDA and cuDNN wheels), and carry the folder along with
# the repository, whose Kafka jars `make kafka-up` fetched into .local/. Results go to $OUT (default
# bench/results/gpu-check-<UTC time>/); copy the tables into docs/BENCHMARKS.md with the date and the GPU.
#
# GPU_CHECK_PROVIDERS (default cuda), GPU_CHECK_SIZES, GPU_CHECK_SECONDS and GPU_CHECK_DRAIN_SECONDS change
# what runs; GPU_CHECK_REQUIRE (default CUDAExecutionProvider) is the provider that must have served.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=.venv/bin
OUT=${OUT:-bench/results/gpu-check-$(date -u +%Y%m%dT%H%M%SZ)}
PROVIDERS=${GPU_CHECK_PROVIDERS:-cuda}
SIZES=${GPU_CHECK_SIZES:-1,4,16,64,256,512}
SECONDS_PER_SIZE=${GPU_CHECK_SECONDS:-1.0}
DRAIN_SECONDS=${GPU_CHECK_DRAIN_SECONDS:-4}
REQUIRE=${GPU_CHECK_REQUIRE:-CUDAExecutionProvider}
KAFKA=deploy/kafka-local/kafka.sh

if [[ ! -x $BIN/microbatch ]]; then
    echo "gpu-check: no $BIN/microbatch; run 'make venv' first" >&2
    exit 2
fi
if [[ -n ${WHEELS:-} ]]; then
    "$BIN/pip" install --quiet --no-index --find-links "$WHEELS" 'onnxruntime-gpu[cuda,cudnn]' nvidia-ml-py
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

started=0
if ! $KAFKA status >/dev/null 2>&1; then
    $KAFKA up
    started=1
fi
trap '[[ $started == 1 ]] && $KAFKA down >/dev/null' EXIT

mkdir -p "$OUT"
for model in metrics-anomaly log-classifier; do
    rc=0
    MICROBATCH_LOG__FORMAT=json "$BIN/microbatch" sweep --model "$model" --providers "$PROVIDERS" \
        --sizes "$SIZES" --seconds "$SECONDS_PER_SIZE" --pipeline --drain-seconds "$DRAIN_SECONDS" \
        --no-plot --out "$OUT" >"$OUT/sweep-$model.log" 2>&1 || rc=$?
    if ((rc)); then
        echo "gpu-check FAILED: the sweep of $model exited $rc; its log: $OUT/sweep-$model.log" >&2
        tail -n 3 "$OUT/sweep-$model.log" >&2
        exit 1
    fi
done
"$BIN/python" -m bench.gpucheck "$OUT" --require "$REQUIRE"
