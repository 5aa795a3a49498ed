#!/usr/bin/env bash
# One GPU session's checks, on an offline GPU machine, from a Partita checkout holding
# device-wheels/ (scripts/prepare_device_wheels.py -o device-wheels --warm-cache sm_90):
# installs the wheels, unpacks the warmed cubin cache, then runs partita-doctor --validate
# (its JSON table), the `gpu` tests and the attention benchmark. Everything it prints is also
# written under $OUT (default ./gpu-results). Each step has a time limit, so a hang in one
# leaves the others their time; the exit status is the worst of the steps'.
set -u -o pipefail
out=${OUT:-gpu-results}
mkdir -p "$out"
status=0
python3 -m pip install -q --no-index --no-deps --no-compile device-wheels/*.whl || exit 1
if [ -f device-wheels/cubins-sm_90.tar.xz ]; then
  mkdir -p ~/.cache/partita/cubins && tar -xJf device-wheels/cubins-sm_90.tar.xz -C ~/.cache/partita/cubins
fi
export PYTHONPATH=$PWD  # the checkout's benchmarks and tests import this tree
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
timeout 330 python3 -m partita.tools.doctor --validate --json "$out/validation.json" --step-timeout 200 \
  --total-timeout 320 2>&1 | tee "$out/validate.txt" || status=1
timeout 240 python3 -m pytest -q -m gpu -n 12 -p no:cacheprovider tests 2>&1 | tail -40 | tee "$out/gpu-tests.txt" \
  || status=1
for d in 64 128 256; do  # the mma.sync form, then the wgmma one (sm_90a)
  timeout 90 python3 benchmarks/bench_attention.py --head-dim "$d" 2>&1 | tee -a "$out/attention.txt" || status=1
  timeout 90 python3 benchmarks/bench_attention.py --head-dim "$d" --wgmma 2>&1 | tee -a "$out/attention.txt" \
    || status=1
done
exit $status
