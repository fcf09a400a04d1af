# call 37: experiment, a persistent grouped GEMM forward with the tile loop flattened into the k loop
set -o pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $OUT/env.txt
cat $OUT/env.txt
bash .whl/install.sh > $OUT/log.txt 2>&1
echo "commit $COMMIT" >> $OUT/env.txt
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
timeout 420 python3 .whl/gmm_flat.py --json $OUT/gmm_flat_call37.json > $OUT/gmm_flat_call37.txt 2>&1; cat $OUT/gmm_flat_call37.txt | grep -v Warn | tail -30
cp .whl/gmm_flat.py $OUT/
