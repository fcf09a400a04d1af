# call 39: the flattened persistent grouped GEMM (7e3b770) against the shipped tiles, kernels alone; its GPU tests
set -o pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $OUT/env.txt
cat $OUT/env.txt
bash .whl/install.sh > $OUT/log.txt 2>&1
echo "commit $COMMIT" >> $OUT/env.txt
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
timeout 230 python3 benchmarks/grouped_matmul_sweep.py --shapes 1,0,2 --kernels fwd,dlhs --only 0,1,19,20 --json $OUT/sweep_call39.json > $OUT/sweep_call39.txt 2>&1; grep -E "dense|fwd|dlhs" $OUT/sweep_call39.txt | grep -v bfc_ | cut -c1-150
timeout 90 python3 -m pytest -v -p no:cacheprovider -o addopts= -rf tests/conformance/test_conformance.py \
  -m "not full and not packaging" -k "grouped_matmul and triton" -n 14 > $OUT/conformance_call39.txt 2>&1; tail -2 $OUT/conformance_call39.txt
timeout 90 python3 -m pytest -v -p no:cacheprovider -o addopts= -rf tests/gpu/test_moe_pool_ssm1_gpu.py -k "grouped_matmul and persistent" -n 8 > $OUT/gpu_tests_call39.txt 2>&1; tail -2 $OUT/gpu_tests_call39.txt
