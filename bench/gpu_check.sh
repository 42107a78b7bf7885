#!/usr/bin/env bash
# Issue 32's GPU check: one script, at most ~8 minutes, on a machine with an NVIDIA GPU
# and TensorFlow that sees it (this repository's trainer install, e.g.
# `pip install -e '.[trainer]' 'tensorflow[and-cuda]'`, or the trainer image).
#   1. the card, and TensorFlow's view of it;
#   2. ResNet50 (96 px, batch 128, mixed precision) images/s, ours vs model.fit at the same
#      knobs: one step per call and 20, XLA off and on (bench/step_loop.py, one repeat);
#   3. SIGTERM -> saved on the GPU, --steps-per-loop 1 vs auto, one worker
#      (bench/notice_latency.py), and restart -> first step.
# The figures land in $OUT (default /tmp/gpu_check). This workplace's lent device
# machines have no TensorFlow and fetch nothing (its wheel is ~600 MB, over what a
# call carries), so the check runs where TensorFlow with CUDA is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/card.txt"
"$PY" -c "import tensorflow as tf; g = tf.config.list_physical_devices('GPU'); \
print('TensorFlow', tf.__version__, 'GPUs', g); raise SystemExit(0 if g else 'TF sees no GPU')"
timeout 330 "$PY" bench/step_loop.py --models resnet50 --repeats 1 --steps 150 --warm-up 50 \
  --batch 128 --image-size 96 --steps-per-loop 20 --mixed-precision --all-threads \
  | tee "$OUT/step_loop.txt"
timeout 120 "$PY" bench/notice_latency.py --workers 1 --repeats 1 --at 60 --backbone resnet50 \
  --image-size 96 --batch 128 --mixed-precision --all-threads | tee "$OUT/notice.txt"
echo "gpu_check: done; figures in $OUT"
