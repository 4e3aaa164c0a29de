#!/usr/bin/env bash
# One GPU's figures for docs/benchmarks.md, in one run of a few minutes:
#   sim    `loco-train bench sim` at 4096 and 16384 environments (forward, training window,
#          forward+backward), against MuJoCo on the same host's cores;
#   sac    `loco-train bench sac`: the SAC learner's updates/s on the GPU (default config and the
#          ANYmal preset), eager and replayed from CUDA graphs (with its profile), and the same
#          on the host's CPU (all threads) as the baseline; test/test_sac_cuda_graphs.py;
#   shac   a short SHAC run on ANYmal on the GPU (env steps/s, return, no non-finite windows).
# Each step has its own time limit; a step that fails is reported and the next one runs. The last
# line of each step's log is its JSON; all of them go to OUT/results.jsonl.
#
#   tools/cuda/bench.sh OUT        # python3 with torch (CUDA), warp-lang 1.19 and mujoco 4.0
#   DEVICE=cpu ENVS=16,32 SAC_SECONDS=1 SHAC_ENVS=16 SHAC_ITERATIONS=2 tools/cuda/bench.sh OUT
#                                  # the same steps, small, on a machine without a GPU
set -u
out=${1:?usage: tools/cuda/bench.sh OUT}
device=${DEVICE:-cuda}
envs=${ENVS:-4096,16384}
sac_seconds=${SAC_SECONDS:-5}
shac_envs=${SHAC_ENVS:-4096}
shac_iterations=${SHAC_ITERATIONS:-40}
py=${PYTHON:-python3}
mkdir -p "$out"
export MUJOCO_GL=${MUJOCO_GL:-disable} PYTHONUNBUFFERED=1
results="$out/results.jsonl"
: > "$results"

step() {  # step NAME LIMIT_S ARGS...: run `loco-train ARGS` and keep its last line if JSON
    local name=$1 limit=$2 start rc last
    shift 2
    echo "== $name: loco-train $*"
    start=$(date +%s)
    timeout --signal=INT --kill-after=20 "$limit" "$py" -m loco_train.cli "$@" \
        > "$out/$name.log" 2>&1
    rc=$?
    last=$(tail -n 1 "$out/$name.log")
    if [[ $rc -eq 0 && $last == '{'* ]]; then
        printf '{"step": "%s", "seconds": %d, "result": %s}\n' "$name" $(($(date +%s) - start)) \
            "$last" >> "$results"
    else
        printf '{"step": "%s", "seconds": %d, "rc": %d}\n' "$name" $(($(date +%s) - start)) \
            "$rc" >> "$results"
        tail -n 25 "$out/$name.log"
    fi
    tail -n 1 "$results"
}

"$py" - > "$out/host.json" <<'EOF'
import json, os, platform
import torch, warp as wp
wp.init()
cuda = torch.cuda.is_available()
print(json.dumps({
    'gpu': torch.cuda.get_device_name(0) if cuda else None,
    'torch': torch.__version__, 'warp': wp.__version__, 'python': platform.python_version(),
    'cpu_cores': os.cpu_count(),
}))
EOF
cat "$out/host.json"

step sim 200 bench sim --device "$device" --envs "$envs" --seconds 3
step sac_gpu 75 bench sac --device "$device" --seconds "$sac_seconds"
if [[ $device == cuda* ]]; then
    step sac_gpu_graphs 75 bench sac --device "$device" --seconds "$sac_seconds" --cuda-graphs \
        --profile
    timeout 120 "$py" -m pytest -q -p no:cacheprovider test/test_sac_cuda_graphs.py \
        > "$out/pytest_cuda_graphs.log" 2>&1
    printf '{"step": "pytest_cuda_graphs", "rc": %d, "summary": "%s"}\n' $? \
        "$(tail -n 1 "$out/pytest_cuda_graphs.log" | tr -d '"')" >> "$results"
    tail -n 1 "$results"
fi
step sac_cpu 60 bench sac --device cpu --threads 0 --seconds "$sac_seconds"
step shac 200 shac --env anymal --device "$device" --num-envs "$shac_envs" \
    --iterations "$shac_iterations" --checkpoint-interval 0 --log-dir "$out/shac" --no-progress

"$py" - "$out/shac" >> "$results" <<'EOF'
import json, sys
import numpy as np
from loco_train.experiments.compare import read_scalars
run = sys.argv[1]  # the SHAC run's own log, also when its step ran out of time
_, seconds = read_scalars(run, 'perf/iteration_s')  # (K,) s per iteration
_, steps = read_scalars(run, 'perf/env_steps')  # (K,) cumulative env steps
_, returns = read_scalars(run, 'train/episode_return')
rate = None
if len(seconds) > 3:  # iterations from the fourth: the first launch directly, the second capture
    rate = float((steps[-1] - steps[2]) / np.sum(seconds[3:]))
print(json.dumps({
    'step': 'shac_log', 'iterations': len(seconds), 'env_steps': int(steps[-1]),
    'env_steps_per_s_from_4th': rate, 'first_iterations_s': [round(float(s), 3) for s in seconds[:4]],
    'return_last': float(returns[-1]) if len(returns) else None,
}))
EOF
tail -n 1 "$results"
