# call 42: XLA mean_pooling by items and the Triton one (70bfdf6); state_space_v1 with compile-time widths
# (fb6d3c1) against the kernels before it (.whl/old_ssm1 = fb6d3c1~1), same machine; ssm1 GPU tests
set -o pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $OUT/env.txt
bash .whl/install.sh > $OUT/log.txt 2>&1
echo "commit $COMMIT" >> $OUT/env.txt
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
timeout 70 python3 -m ejkernel bench mean_pooling --impl xla --impl triton --no-peers --dtype bfloat16 --repeats 3 --tokens 262144 --hidden 4096 --seqs 64 --json $OUT/mp_xla_call42.json > $OUT/mp_xla_call42.txt 2>&1; grep -E "│" $OUT/mp_xla_call42.txt
S="python3 -m ejkernel bench state_space_v1 --impl triton --dtype bfloat16 --repeats 5 --b 1 --s 4096 --d 4096 --n 16"
timeout 50 $S --json $OUT/ssm1_new_call42.json > $OUT/ssm1_new_call42.txt 2>&1; grep -E "│" $OUT/ssm1_new_call42.txt
timeout 80 python3 -m pytest -v -p no:cacheprovider -o addopts= -rf tests/gpu/test_moe_pool_ssm1_gpu.py -k state_space_v1 -n 4 > $OUT/ssm1_gpu_tests_call42.txt 2>&1; tail -1 $OUT/ssm1_gpu_tests_call42.txt
cp .whl/old_ssm1/_kernel.py .whl/old_ssm1/_call.py packages/ejkernel-triton/src/ejkernel_triton/state_space_v1/
timeout 50 $S --json $OUT/ssm1_old_call42.json > $OUT/ssm1_old_call42.txt 2>&1; grep -E "│" $OUT/ssm1_old_call42.txt
