#!/usr/bin/env bash
# The linear-attention and delta-rule ops (gla_attention, lightning_attention, recurrent_attention,
# state_space_v2, kernel_delta_attention, gated_delta_rule) on one H100/H200, in steps (STEPS picks
# them, in this order), each under its own timeout and all within BUDGET_S seconds; records to
# $OUT (or /tmp/out) as each step finishes:
#   env     versions, GPU, whether fla imports                                  -> env.txt
#   conf    the shared conformance cases of these ops on their Triton implementations (outputs and
#           every input's gradient), plus the GPU-only tests of tests/conformance/test_linear_attention.py
#           and test_delta_rule.py (Triton at T = 65536, compiled memory at 4k/16k/64k)
#                                                                               -> conformance_linear_delta.{xml,txt}
#   main    B=4 T=4096 H=16 D=128 bf16, fwd and fwd+bwd: ejkernel Triton and XLA beside fla-core 0.6.0
#           (chunk_gla, chunk_lightning_attn, chunk_simple_gla for the SSD, chunk_kda, chunk_gated_delta_rule),
#           one process per op                                                  -> bench.jsonl, bench_main_<op>.txt
#   extra   one varlen batch (7 sequences, 16384 tokens) and B=1 T=32768, per op -> bench.jsonl, bench_extra_<op>.txt
#   table   bench.jsonl as one JSON array and a text table                      -> bench.json, bench_table.txt
# fla's backward of its scalar-gated kernels refuses Hopper with Triton 3.4-3.7.0 (fla issue #640):
# the refusal is recorded, then timed once more with fla's guard off (rows "fla-bypass640").
# From the repository root on the GPU machine:
#   bash .whl/install.sh && bash benchmarks/h200/wave2_linear_delta.sh
# On a fresh machine fla autotunes every kernel on its first calls: one op's fla rows took more than
# 55 s beyond ejkernel's (~15 s Triton, ~25 s XLA) on an H100, so run two or three ops per call
# (OPS="gla gdn", MAIN_S=150). Its autotuning results are kept in $OUT/fla-autotune.tgz: copy that
# file to .whl/fla-autotune.tgz here and the next call (carry .whl) skips fla's autotuning.
# BUDGET_S (default 460) caps the whole script: a step gets what is left, one that would get under
# 15 s is skipped (steps.txt says so). fla autotunes on its first calls and each step compiles anew,
# so one call may not reach every "extra" step: run them in a second call (STEPS="extra table").
#   STEPS="extra table" BUDGET_S=300 bash benchmarks/h200/wave2_linear_delta.sh     # a part
# BENCH_ARGS adds options to every benchmark call (e.g. a CPU dry run:
#   STEPS="main extra table" BENCH_ARGS="--shape 2,40,2,16 --varlen 5,0,1,20 --long-t 70 --impls xla" ...).
set -uo pipefail
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false  # JAX and torch share the GPU
out=${OUT:-/tmp/out}; mkdir -p "$out"
steps=" ${STEPS:-env conf main extra table} "
budget=${BUDGET_S:-460}
ops=${OPS:-gla lightning ssd kda gdn}
t_start=$(date +%s)
# step NAME SECONDS CMD...: runs CMD under min(SECONDS, what the budget leaves), output to $out/NAME.txt.
step() {
  local name=$1 want=$2; shift 2
  local left=$(( budget - ($(date +%s) - t_start) - 5 ))
  local limit=$(( want < left ? want : left ))
  if (( limit < 15 )); then
    echo "$name: skipped (budget of ${budget} s spent)" | tee -a "$out/steps.txt"; return 0
  fi
  local t0=$(date +%s)
  timeout -k 10 "$limit" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  local note=""; (( rc == 124 || rc == 137 )) && note=" TIMED OUT"
  echo "$name: rc=$rc $(( $(date +%s) - t0 )) s (limit $limit s)$note" | tee -a "$out/steps.txt"
  return 0
}
bench() {  # bench STEP OP CASES REPEATS SECONDS
  step "bench_$1_$2" "$5" python3 benchmarks/linear_delta_vs_fla.py --op "$2" --cases "$3" --repeats "$4" \
    --jsonl "$out/bench.jsonl" --fla-bypass-640 ${BENCH_ARGS:-}
  grep -h '^{' "$out/bench_$1_$2.txt" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    t = lambda k: "-" if r.get(k) is None else "%.3f" % r[k]
    err = r.get("error") or r.get("fwdbwd_error") or ""
    print("  %-22s %-36s %-14s fwd %9s  f+b %9s  %s" % (r["op"], r["shape"], r["impl"], t("fwd_ms"), t("fwdbwd_ms"), err[:90]))
' 2>/dev/null
}
if [[ $steps == *" env "* ]]; then
  step env 60 bash -c '
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv,noheader
    git log -1 --format="HEAD %h (%s)" 2>/dev/null; git status --short 2>/dev/null | head -3 | sed "s/^/uncommitted: /"
    python3 -c "import jax, triton; print(\"jax\", jax.__version__, jax.devices(), \"triton\", triton.__version__)"
    python3 -c "import jax_triton; print(\"jax_triton\", jax_triton.__version__)"
    python3 -c "import torch; print(\"torch\", torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
    python3 -c "import fla, fla.ops.gla, fla.ops.kda, fla.ops.gated_delta_rule, fla.ops.simple_gla, fla.ops.lightning_attn; print(\"fla\", fla.__version__)" \
      || echo "fla does not import (einops missing? it is a dependency of fla-core): the fla rows will record the error"'
  cat "$out/env.txt"
fi
if [[ $steps == *" conf "* ]]; then
  k="(gla_attention or lightning_attention or recurrent_attention or state_space_v2 or kernel_delta_attention"
  k="$k or gated_delta_rule or linear_attention or delta_rule) and triton"
  # The project's addopts are dropped (the image's pytest plugins differ); its default marker filter is kept.
  step conformance_linear_delta ${CONF_S:-170} python3 -m pytest -v -p no:cacheprovider -o addopts="" \
    -m "not full and not packaging" tests/conformance -k "$k" -n ${WORKERS:-12} --maxfail=30 -rf --durations=8 \
    --junitxml="$out/conformance_linear_delta.xml"
  grep -E "passed|failed|FAILED|Error" "$out/conformance_linear_delta.txt" | tail -15
fi
# fla's autotuning results (Triton's autotune cache: <key>/<kernel>.autotune.json) are kept in
# $out/fla-autotune.tgz after every benchmark step; a later call that carries that file as
# $FLA_AUTOTUNE_IN (default .whl/fla-autotune.tgz, where stage-wheels' .whl/ is carried) starts
# with them and compiles only fla's chosen configs (the choice was timed on the card of the call
# that made the file: the same sm_90 target, H100 or H200).
export FLA_TRITON_CACHE_DIR=${FLA_TRITON_CACHE_DIR:-/tmp/triton-fla-cache}
mkdir -p "$FLA_TRITON_CACHE_DIR"
fla_in=${FLA_AUTOTUNE_IN:-.whl/fla-autotune.tgz}
if [[ -f $fla_in ]]; then
  tar xzf "$fla_in" -C "$FLA_TRITON_CACHE_DIR" && echo "fla autotune results from $fla_in: $(tar tzf "$fla_in" | grep -c autotune.json) kernels" | tee -a "$out/steps.txt"
fi
keep_fla_autotune() {
  (cd "$FLA_TRITON_CACHE_DIR" && find . -name "*.autotune.json" | tar czf "$out/fla-autotune.tgz" -T -) 2>/dev/null
}
if [[ $steps == *" main "* ]]; then
  for op in $ops; do bench main "$op" main 5 ${MAIN_S:-150}; keep_fla_autotune; done
fi
if [[ $steps == *" extra "* ]]; then
  for op in $ops; do bench extra "$op" varlen,long 3 ${EXTRA_S:-90}; keep_fla_autotune; done
fi
if [[ $steps == *" table "* && -s "$out/bench.jsonl" ]]; then
  python3 -c 'import json, sys; json.dump([json.loads(l) for l in open(sys.argv[1]) if l.strip()], open(sys.argv[2], "w"), indent=1)' \
    "$out/bench.jsonl" "$out/bench.json"
  python3 benchmarks/linear_delta_vs_fla.py --table "$out/bench.jsonl" > "$out/bench_table.txt" 2>&1
  cat "$out/bench_table.txt"
fi
echo "total $(( $(date +%s) - t_start )) s" | tee -a "$out/steps.txt"
# The device tool returns only the first few files of $OUT (a call of this script wrote 13 and got
# 8 back, fla-autotune.tgz lost): keep the records and bundle every other file into logs.tgz
# (BUNDLE_LOGS=0 keeps them as they are).
if [[ ${BUNDLE_LOGS:-1} == 1 ]]; then
  keep='^(bench\.jsonl|bench\.json|bench_table\.txt|steps\.txt|fla-autotune\.tgz|conformance_linear_delta\.txt|logs\.tgz)$'
  (cd "$out" && ls | grep -vE "$keep" > .bundle.lst; if [[ -s .bundle.lst ]]; then tar czf logs.tgz -T .bundle.lst && xargs rm -f < .bundle.lst; fi; rm -f .bundle.lst)
fi
