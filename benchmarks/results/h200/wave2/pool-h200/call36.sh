# call 36: mean_pooling with 16-byte row loads (row stride a compile-time constant) on an H200:
# the benchmark (with the XLA peer), a config sweep, the mean_pooling GPU tests.
set -o pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $OUT/env.txt
cat $OUT/env.txt
bash .whl/install.sh > $OUT/log.txt 2>&1
python3 -c "import sys, jax, jaxlib, triton, jax_triton; print(sys.version.split()[0], 'jax', jax.__version__, jaxlib.__version__, 'triton', triton.__version__, 'jax_triton', jax_triton.__version__)" >> $OUT/env.txt 2>&1
echo "commit $COMMIT" >> $OUT/env.txt
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
timeout 120 python3 -m ejkernel bench mean_pooling --impl triton --dtype bfloat16 --repeats 5 --tokens 262144 --hidden 4096 --seqs 64 --json $OUT/mp_call36.json > $OUT/bench_call36.txt 2>&1
grep -E "│|wrote|GB" $OUT/bench_call36.txt | tail -12
timeout 140 python3 benchmarks/pool_ssm1/sweep.py --only pool --out $OUT/sweep_call36.jsonl --pool-cfgs "32,256,2048,4,3;32,256,512,4,3;64,256,1024,8,3;64,256,2048,8,3;16,256,1024,2,3;32,128,1024,2,3;64,128,1024,4,3;32,512,1024,4,3;128,256,2048,8,3;64,256,1024,4,3;32,256,4096,4,3;16,512,1024,4,3;8,256,1024,1,3;64,512,2048,8,3" > $OUT/sweep_call36.txt 2>&1
grep -E "copy|pool" $OUT/sweep_call36.txt | tail -20
timeout 120 python3 -m pytest -v -p no:cacheprovider -o addopts= -rf tests/gpu/test_moe_pool_ssm1_gpu.py -k mean_pooling -n 8 > $OUT/gpu_tests_call36.txt 2>&1; tail -2 $OUT/gpu_tests_call36.txt
timeout 90 python3 -m pytest -v -p no:cacheprovider -o addopts= -rf tests/conformance/test_conformance.py \
  -m "not full and not packaging" -k "mean_pooling and triton" -n 8 > $OUT/conformance_call36.txt 2>&1; tail -2 $OUT/conformance_call36.txt
