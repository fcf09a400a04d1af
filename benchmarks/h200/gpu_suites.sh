#!/usr/bin/env bash
# Every GPU test suite of the project on one H200, in stages (STAGES picks them, in this order),
# for rechecking a change that touches the GPU backends; records to $OUT (or /tmp/out):
#   build  build ejkernel-cuda for Hopper (the other stages that need it run it first)
#   conf   the shared conformance suite on the GPU implementations (Triton flash and ring, cuDNN,
#          CUDA page attention), forward and gradients; junit XML (CONF_TESTS: a shard of the files, CONF_K: its -k filter,
#          CONF_SAMPLE=N: N cases of each test x implementation x config, as tests/conftest.py's --sample; a
#          flash_attention case takes 50-120 s of one worker on the H200: the whole suite needs several calls)
#   cudnn  the cuDNN backend alone: its GPU tests, its conformance and call modes, the default calls,
#          then flash_attention's default call and cuDNN scaled_dot_product_attention against
#          jax.nn's cuDNN on the dense attention table's shapes (bf16, causal both)
#   gpu    the op folders' GPU tests (tests/ops/**/*gpu.py: TMA forwards, every head dim, realistic tiles, the
#          ring on every GPU; GPU_TESTS picks files; not the autotune test: STAGES=tune)
#   lse    the log-sum-exp protocol (ring attention's inner kernels)
#   cuda   the ejkernel-cuda package's own tests
#   tune   autotune persistence across processes
#   first  a user's first calls with default options (run it before build: it shows the message
#          of a platform="cuda" call without ejkernel-cuda)
#   calls  every GPU implementation eagerly, under jit, vmap and shard_map; the default calls at
#          their sizes; grouped_matmul with float32 and bfloat16 outputs; both page cache layouts
#   firstbench  grouped_matmul float32 vs bfloat16 outputs at the four MoE shapes; page_attention
#          in both cache layouts (CUDA and XLA)
#   serving  the serving ops on the GPU: the Triton kernel's tiles at serving sizes, the CUDA
#          decode-only path of ragged_page_attention_v2/v3 (eager and jitted), their conformance
#   servebench  the serving steps of the bars (bf16, h32/8, d128, page 16): 64 decodes at 8k;
#          60 decodes at 4k + 4 chunks of 512 at 8k, and each part alone; 8 prompts of 2048
#   servesweep  the Triton paged kernel's autotuning space on the prefill-only bar step (8 x 2048)
#   servetiles  ragged_page_attention_v3's Triton heuristic beside the 256-row, 8-warp prefill tiles
#          (prefill tiles and decode splits launched apart) on the three bar steps; SERVE_CONFIG overrides them
#   benchlist  each `ejkernel bench` command line of BENCHES (separated by ";"), BENCH_ONE_S each,
#          records as bench_<i>.json
#   fla    benchmarks/linear_delta_vs_fla.py with FLA_ARGS (default: NSA at DeepSeek's sizes, T 32k,
#          64 query heads over 4), FLA_S seconds; records in fla.json
#   xlapeers  every op's XLA path beside its plain-JAX peer at the op's default bench shapes, bf16
#          (ratio, compile_s, compile_fwdbwd_s; one JSON and text per op in $OUT/xlapeers, a
#          summary in xlapeers.txt); each op under XLAPEER_S seconds (default 45; 12 was too short for
#          every op on the H200: import, GPU start and compiles); XLAPEER_OPS picks the ops
#   bench  the bar shapes: flash_attention b2 s8192 h16 d128 bf16 causal both (Triton vs cuDNN),
#          page_attention b32 h32/8 d128 ctx 8192 bf16 (CUDA vs cuDNN dense decode)
# From the repository root on the GPU machine:
#   bash .whl/install.sh && STAGES="build conf" bash benchmarks/h200/gpu_suites.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
stages=" ${STAGES:-first build conf gpu lse cuda bench} "
# The project's addopts are dropped (the image's pytest plugins differ); its default marker filter is kept.
# A stage that runs out of time must not leave its xdist workers compiling into the next stage.
# Default verbosity (a stage adds -v to name each item). Each run gets its own session, and only
# that process group is killed, so lanes (lanes.sh) on the other GPUs keep running.
# Tests not started a third of the stage's limit before its end (at most 120 s: a flash_attention
# conformance case can take that long on one worker) are skipped (tests/conftest.py), so pytest
# ends on its own and prints the tracebacks and the junit XML; the timeout stays as the backstop.
gpu_pytest() {
  EJKERNEL_TEST_DEADLINE=$(($(date +%s) + $1 - ($1 < 360 ? $1 / 3 : 120))) XLA_PYTHON_CLIENT_PREALLOCATE=false setsid timeout "$1" python3 -m pytest -p no:cacheprovider -o addopts="" \
    -m "${MARKS:-not full and not packaging}" -rf "${@:2}" &
  local pid=$!; wait $pid; local rc=$?; kill -9 -- -$pid 2>/dev/null; return $rc
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
{ git log -1 --format="HEAD %h (%s)"; git status --short | head -3 | sed 's/^/uncommitted: /'; } 2>/dev/null | tee -a "$out/gpu.txt"
if [[ $stages == *" first "* ]]; then
  python3 - <<'PY' 2>&1 | tee "$out/first_calls.txt"
import jax, jax.numpy as jnp, ejkernel
q = jnp.ones((2, 32, 128), jnp.bfloat16)
kc = jnp.ones((1288, 16, 8, 128), jnp.bfloat16)
try:
    ejkernel.page_attention(q, kc, kc, jnp.array([100, 200]), jnp.zeros((2, 64), jnp.int32), platform="cuda")
except Exception as e:
    print(f"platform='cuda' without ejkernel-cuda: {type(e).__name__}: {e}")
PY
fi
if [[ $stages == *" build "* ]]; then
  t0=$(date +%s)
  EJKERNEL_CUDA_ARCHS=${EJKERNEL_CUDA_ARCHS:-90a-real} python3 -m pip install -q --no-index --no-deps \
    --no-build-isolation -e packages/ejkernel-cuda > "$out/cuda_build.txt" 2>&1 || { tail -30 "$out/cuda_build.txt"; exit 1; }
  echo "cuda build: $(( $(date +%s) - t0 )) s"
fi
if [[ $stages == *" calls "* ]]; then
  gpu_pytest ${CALLS_S:-360} tests/ops/test_default_calls_gpu.py tests/ops/test_call_modes_gpu.py \
    tests/ops/grouped_matmul/test_out_dtype_gpu.py packages/ejkernel-cuda/tests/test_cuda.py \
    -n ${WORKERS:-14} --durations=10 -v > "$out/calls.txt" 2>&1
  grep -E "passed|failed|FAILED|Error" "$out/calls.txt" | tail -30
fi
if [[ $stages == *" firstbench "* ]]; then
  timeout ${GMM_S:-240} python3 -m ejkernel bench grouped_matmul --impl triton --dtype bfloat16 --repeats ${REPEATS:-5} \
    --shape 16384,4096,2048,8 --shape 16384,2048,1536,64 --shape 65536,4096,1408,64 --out-dtype float32,bfloat16 \
    --no-ragged-dot --json "$out/grouped_matmul_out_dtype.json" > "$out/gmm_out_dtype.txt" 2>&1
  timeout ${GMM_S:-240} python3 -m ejkernel bench grouped_matmul --impl triton --dtype bfloat16 --repeats ${REPEATS:-5} \
    --shape 8192,7168,2048,256 --dist zipf --out-dtype float32,bfloat16 --no-ragged-dot \
    --json "$out/grouped_matmul_out_dtype_zipf.json" >> "$out/gmm_out_dtype.txt" 2>&1
  tail -30 "$out/gmm_out_dtype.txt"
  timeout ${PAGE_S:-200} python3 -m ejkernel bench page_attention --dtype bfloat16 --impl cuda --impl xla --b 32 --h 32 \
    --hk 8 --d 128 --block-size 16 --context 8192 --cache-layout both --repeats ${REPEATS:-5} \
    --json "$out/page_attention_layouts.json" > "$out/page_layouts.txt" 2>&1
  tail -16 "$out/page_layouts.txt"
fi
if [[ $stages == *" conf "* ]]; then
  # CONF_TESTS picks a shard (the whole suite is ~480 items: more than one 600-s call at 14 workers).
  gpu_pytest ${CONF_S:-420} ${CONF_TESTS:-tests/ops/*/test_conformance.py tests/ops/*/test_properties.py \
    tests/ops/page_attention/test_dense_equivalence.py tests/ops/test_call_modes.py} -k "${CONF_K:-triton or cuda or cudnn or pallas_gpu}" \
    ${CONF_SAMPLE:+--sample=$CONF_SAMPLE} \
    -n ${WORKERS:-14} --maxfail=20 --durations=5 -v \
    --junitxml="$out/gpu_conformance.xml" > "$out/gpu_conformance.txt" 2>&1
  grep -E "passed|failed|FAILED|Error" "$out/gpu_conformance.txt" | tail -12
fi
if [[ $stages == *" cudnn "* ]]; then
  gpu_pytest ${CUDNN_S:-300} tests/ops/attention/test_cudnn_gpu.py tests/ops/test_default_calls_gpu.py \
    tests/ops/attention/test_conformance.py tests/ops/test_call_modes_gpu.py -k "cudnn or default" \
    -n ${WORKERS:-14} --durations=5 -v > "$out/cudnn_tests.txt" 2>&1
  grep -E "passed|failed|FAILED|Error" "$out/cudnn_tests.txt" | tail -12
  timeout ${CUDNN_BENCH_S:-300} python3 -m ejkernel bench flash_attention --dtype bfloat16 --repeats ${REPEATS:-5} \
    --impl cudnn --impl default --shape 2,8192,16,128 --shape 4,4096,4096,32,8,128 --shape 8,2048,16,64 \
    --shape 16,1024,16,128 --shape 1,16384,8,256 --causal both --json "$out/flash_attention_cudnn.json" \
    > "$out/flash_attention_cudnn.txt" 2>&1
  grep -E "│" "$out/flash_attention_cudnn.txt"
  timeout ${CUDNN_BENCH_S:-300} python3 -m ejkernel bench scaled_dot_product_attention --dtype bfloat16 \
    --repeats ${REPEATS:-5} --impl cudnn --impl default --shape 2,8192,16,128 --shape 8,2048,16,64 --causal both \
    --json "$out/sdpa_cudnn.json" > "$out/sdpa_cudnn.txt" 2>&1
  grep -E "│" "$out/sdpa_cudnn.txt"
fi
if [[ $stages == *" gpu "* ]]; then
  gpu_pytest ${GPU_S:-420} ${GPU_TESTS:-tests/ops/*gpu.py tests/ops/*/*gpu.py} -k "not autotune" -n ${WORKERS:-14} --durations=5 > "$out/gpu_tests.txt" 2>&1
  grep -E "passed|failed|FAILED|Error" "$out/gpu_tests.txt" | tail -12
fi
if [[ $stages == *" lse "* ]]; then
  gpu_pytest ${LSE_S:-120} tests/ops/ring_attention/test_lse_protocol.py -n 2 > "$out/lse.txt" 2>&1
  grep -E "passed|failed|FAILED" "$out/lse.txt" | tail -4
fi
if [[ $stages == *" cuda "* ]]; then
  gpu_pytest ${CUDA_S:-200} packages/ejkernel-cuda/tests -n ${CUDA_WORKERS:-4} > "$out/cuda_tests.txt" 2>&1
  grep -E "passed|failed|FAILED|Error" "$out/cuda_tests.txt" | tail -8
fi
if [[ $stages == *" tune "* ]]; then
  gpu_pytest ${TUNE_S:-300} tests/framework/test_autotune_gpu.py -rfP -n 2 > "$out/autotune.txt" 2>&1
  grep -E "\[autotune|passed|failed" "$out/autotune.txt" | tail -6
fi
if [[ $stages == *" serving "* ]]; then
  gpu_pytest ${SERVING_S:-300} tests/ops/serving/test_triton_gpu.py packages/ejkernel-cuda/tests/test_cuda_ragged_paged.py \
    tests/ops/serving/test_conformance.py -k "triton or cuda or gpu" -n ${WORKERS:-14} --durations=5 \
    > "$out/serving_tests.txt" 2>&1
  grep -E "passed|failed|FAILED|Error" "$out/serving_tests.txt" | tail -12
fi
if [[ $stages == *" servebench "* ]]; then
  serve=(--h 32 --hk 8 --d 128 --page-size 16 --dtype bfloat16 --repeats ${REPEATS:-5})
  steps=("--decodes 64 --context 8192 --chunks 0" "--decodes 60 --context 4096 --chunks 4 --chunk 512 --chunk-context 8192"
    "--decodes 60 --context 4096 --chunks 0" "--decodes 0 --chunks 4 --chunk 512 --chunk-context 8192"
    "--decodes 0 --chunks 8 --chunk 2048 --chunk-context 2048")
  for op in ${SERVE_OPS:-ragged_page_attention_v2 ragged_page_attention_v3 unified_attention}; do
    i=0
    for step in "${steps[@]}"; do
      i=$((i + 1))
      timeout ${STEP_S:-90} python3 -m ejkernel bench $op "${serve[@]}" $step --json "$out/${op}_$i.json" \
        > "$out/${op}_$i.txt" 2>&1
      grep -E "│" "$out/${op}_$i.txt" | sed "s/^/$op: /"
    done
  done
fi
if [[ $stages == *" servesweep "* ]]; then
  timeout ${SWEEP_S:-400} python3 benchmarks/config_sweep.py ragged_page_attention_v2 --impl triton --candidates \
    --dtype bfloat16 --repeats ${REPEATS:-5} --json "$out/serving_prefill_sweep.json" -- --h 32 --hk 8 --d 128 \
    --page-size 16 --decodes 0 --chunks 8 --chunk 2048 --chunk-context 2048 > "$out/serving_sweep.txt" 2>&1
  grep " ms " "$out/serving_sweep.txt" | sort -k9 -n | head -12
fi
if [[ $stages == *" servetiles "* ]]; then
  cfg=${SERVE_CONFIG:-'{"num_queries_per_block":64,"num_kv_pages_per_block":4,"num_warps":8,"num_stages":3}'}
  i=0
  for step in "--decodes 64 --context 8192 --chunks 0" "--decodes 60 --context 4096 --chunks 4 --chunk 512 --chunk-context 8192" \
      "--decodes 0 --chunks 8 --chunk 2048 --chunk-context 2048"; do
    i=$((i + 1))
    timeout ${STEP_S:-90} python3 benchmarks/config_sweep.py ragged_page_attention_v3 --impl triton --no-peers \
      --config "$cfg" --dtype bfloat16 --repeats ${REPEATS:-5} --json "$out/servetiles_$i.json" -- --h 32 --hk 8 \
      --d 128 --page-size 16 $step > "$out/servetiles_$i.txt" 2>&1
    grep " ms " "$out/servetiles_$i.txt" | cut -c1-110
  done
fi
if [[ $stages == *" benchlist "* ]]; then
  IFS=';' read -ra benches <<< "${BENCHES:-}"
  i=0
  for b in "${benches[@]}"; do
    i=$((i + 1))
    echo "bench $i: ejkernel bench $b" > "$out/bench_$i.txt"
    timeout ${BENCH_ONE_S:-120} python3 -m ejkernel bench $b --json "$out/bench_$i.json" >> "$out/bench_$i.txt" 2>&1
    grep -E "│|Error" "$out/bench_$i.txt" | sed "s/^/bench $i: /"
  done
fi
if [[ $stages == *" fla "* ]]; then
  timeout ${FLA_S:-300} python3 benchmarks/linear_delta_vs_fla.py ${FLA_ARGS:---op nsa --shape 1,32768,64,128 --impls triton,fla} \
    --json "$out/fla.json" > "$out/fla.txt" 2>&1
  python3 benchmarks/linear_delta_vs_fla.py --table "$out/fla.json" 2>&1 | tail -8
fi
if [[ $stages == *" xlapeers "* ]]; then
  mkdir -p "$out/xlapeers"
  for op in ${XLAPEER_OPS:-flash_attention scaled_dot_product_attention attention ring_attention blocksparse_attention \
      native_sparse_attention deepseek_attn flash_mla page_attention ragged_decode_attention ragged_page_attention_v2 \
      ragged_page_attention_v3 unified_attention prefill_page_attention grouped_matmul mean_pooling recurrent_cell \
      state_space_v1 state_space_v2 gla_attention lightning_attention recurrent_attention gated_delta_rule \
      kernel_delta_attention}; do
    timeout ${XLAPEER_S:-45} python3 -m ejkernel bench $op --impl xla --dtype bfloat16 --repeats ${REPEATS:-3} \
      --json "$out/xlapeers/$op.json" > "$out/xlapeers/$op.txt" 2>&1
    rc=$?
    { [[ $rc == 124 ]] && echo "$op: TIMEOUT after ${XLAPEER_S:-45} s (compile or run)"
      grep -E "│" "$out/xlapeers/$op.txt" | sed "s/^/$op: /"; } | tee -a "$out/xlapeers.txt"
  done
fi
if [[ $stages == *" bench "* ]]; then
  timeout ${BENCH_S:-240} python3 -m ejkernel bench flash_attention --dtype bfloat16 --repeats ${REPEATS:-5} --impl triton \
    --shape 2,8192,16,128 --causal both --json "$out/flash_attention_bar.json" > "$out/flash_bench.txt" 2>&1
  tail -12 "$out/flash_bench.txt"
  timeout ${PAGE_S:-150} python3 -m ejkernel bench page_attention --dtype bfloat16 --impl cuda --b 32 --h 32 --hk 8 --d 128 \
    --block-size 16 --context 8192 --repeats ${REPEATS:-5} --json "$out/page_attention_8192.json" > "$out/page_bench.txt" 2>&1
  tail -10 "$out/page_bench.txt"
fi
