#!/usr/bin/env bash
# The whole GPU audit on a leased machine that has no package registry, in one call:
#
#   bash bench/gpu_audit.sh [SKILL ...]        # env: OUT (rows and reports), JOBS, TIMEOUT
#
# Carried beside the checkout (git-ignored): .whl/ (kbase's own wheel and the Python packages that
# machine lacks: pydantic, cryptography, ...; see CONTRIBUTING.md "The GPU tier"), .debs/
# (bubblewrap's .deb, for bench/gpu_setup.sh) and, for signed rows, .gpu/runner.key, which is
# moved out of the checkout (0600) before any snippet runs. Rows are mirrored to $OUT as they are
# written, so a lease that ends mid-audit loses none.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/kbase-gpu-audit}"
mkdir -p "$OUT"
SITE=/opt/kbase-site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$SITE" .whl/*.whl || exit 1
export PYTHONPATH="$SITE"
# shellcheck source=/dev/null
. bench/gpu_setup.sh
if [ -f .gpu/runner.key ]; then
  install -m 600 .gpu/runner.key /root/kbase-runner.key && rm -f .gpu/runner.key
  export KBASE_SIGNING_KEY=/root/kbase-runner.key
fi
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
python3 bench/bench_gpu_audit.py --jobs "${JOBS:-6}" --timeout "${TIMEOUT:-520}" --mirror "$OUT" "$@"
cp bench/results/gpu_audit.json "$OUT/" 2>/dev/null || true
