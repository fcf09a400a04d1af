# call 38: experiment, flattened persistent grouped GEMM forward: tails in a second pool of programs
set -o pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $OUT/env.txt
cat $OUT/env.txt
bash .whl/install.sh > $OUT/log.txt 2>&1
echo "commit $COMMIT" >> $OUT/env.txt
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
F="python3 .whl/gmm_flat.py"
timeout 200 $F --json $OUT/fwd.json --shape 16384,2048,1536,64 --shape 16384,4096,2048,8 --shape 65536,4096,1408,64 --shape 8192,7168,2048,256 > $OUT/fwd.txt 2>&1; grep -v -E "Warn|bfc_alloc" $OUT/fwd.txt | tail -30
timeout 100 $F --json $OUT/dlhs.json --dlhs --shape 16384,2048,1536,64 --shape 16384,4096,2048,8 > $OUT/dlhs.txt 2>&1; grep -v -E "Warn|bfc_alloc" $OUT/dlhs.txt | tail -14
timeout 60 $F --json $OUT/cut.json --cut 3000 --shape 16384,2048,1536,64 > $OUT/cut.txt 2>&1; grep -v -E "Warn|bfc_alloc" $OUT/cut.txt | tail -7
cp .whl/gmm_flat.py $OUT/
