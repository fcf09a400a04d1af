# call 40: the grouped_matmul benchmark at the persistent-grid heuristic (Triton, lax.ragged_dot, dense), the GPU tests call 39 cut
set -o pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $OUT/env.txt
cat $OUT/env.txt
bash .whl/install.sh > $OUT/log.txt 2>&1
python3 -c "import sys, jax, jaxlib, triton, jax_triton; print(sys.version.split()[0], 'jax', jax.__version__, jaxlib.__version__, 'triton', triton.__version__, 'jax_triton', jax_triton.__version__)" >> $OUT/env.txt 2>&1
echo "commit $COMMIT" >> $OUT/env.txt
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
B="python3 -m ejkernel bench grouped_matmul --dtype bfloat16 --repeats 3 --impl triton"
timeout 130 $B --json $OUT/gmm_small_call40.json --shape 16384,4096,2048,8 --shape 16384,2048,1536,64 >> $OUT/bench_call40.txt 2>&1
timeout 110 $B --json $OUT/gmm_large_call40.json --shape 65536,4096,1408,64 >> $OUT/bench_call40.txt 2>&1
timeout 130 $B --json $OUT/gmm_zipf_call40.json --shape 8192,7168,2048,256 --dist zipf >> $OUT/bench_call40.txt 2>&1
grep -E "│|wrote" $OUT/bench_call40.txt
timeout 80 python3 -m pytest -v -p no:cacheprovider -o addopts= -rf tests/gpu/test_moe_pool_ssm1_gpu.py -k "grouped_matmul and persistent and not 128x256 and (zipf or slice or fp32)" -n 3 > $OUT/gpu_tests_call40.txt 2>&1; tail -2 $OUT/gpu_tests_call40.txt
