# The device calls of the twenty-fifth session after r1.sh, as run (one H100 SXM machine, warm
# between calls; each call's files are in the folder named after it). r1.sh's cold-code part
# failed (cold_code.py's reader called torch.sum with out= and no dim), so r2 ran it again after
# the fix, then the twenty-fourth session's step 107 alternation (fewer shapes for the time left).

# r2: cold_code.py again; softmax_tile.patch alternated with main.
export PYTHONPATH=$PWD/src:$PWD/bench/studies:$PWD/tests; C=$OUT/cold; mkdir -p $C
timeout 200 python bench/studies/cold_code.py $C --reps 100 --shapes 4x1024,32x1024,4x8192 --backends auto,gluon,triton/block_t=32/num_stages=1 > $C/cold.log 2>&1
R=$OUT/r2p; mkdir -p $R; export PYTHONPATH=$PWD/src
for round in 1 2; do for tree in main patch; do
  if [ $tree = patch ]; then git apply bench/studies/patches/softmax_tile.patch; fi
  timeout 60 python -m mixmla bench --quick --peers none --paths fp8,mxfp4 --shape 256,1,8192 --shape 64,1,8192 --shape 32,1,8192 --out $R/$tree-$round > $R/$tree-$round.log 2>&1
  if [ $tree = patch ]; then git apply -R bench/studies/patches/softmax_tile.patch; fi
done; done

# r3: step 105's bounds (the twenty-third session's r2.sh on two shapes); the cluster round
# (the twenty-second session's r5.sh on four shapes) failed at its first shape (cluster_timing.py
# unpacks two launches from a plan that launches one).
export PYTHONPATH=$PWD/src:$PWD/bench/studies:$PWD/tests; R=$OUT/r2; mkdir -p $R
python bench/studies/hopper_smem_bounds.py $R/bounds > /dev/null
timeout 170 python bench/studies/hopper_variants.py $R/bnd $R/bounds/var_nostore.py $R/bounds/var_novalue.py $R/bounds/var_neither.py --shapes 256x8192,64x8192 > $R/bounds.log 2>&1
git apply bench/studies/patches/triton_clusters.patch && R5=$OUT/r5 && mkdir -p $R5 && PYTHONPATH=$PWD/src:$PWD/bench/studies timeout 200 python bench/studies/cluster_timing.py $R5 --rounds 2 --shapes 4x1024,32x1024,64x1024,32x8192 > $R5/timing.log 2>&1
git apply -R bench/studies/patches/triton_clusters.patch

# r4: host cost per call (issue 12).
H=$OUT/host; mkdir -p $H; timeout 200 python bench/host_cost.py --out $H --calls 80 --shapes 4x1024,64x1024,256x1024 > $H/host.log 2>&1

# r5: append_kv (issue 14) and the paged bench on three shapes without peers.
A=$OUT/app; mkdir -p $A; timeout 100 python bench/studies/append_kv_study.py --out $A > $A/app.log 2>&1
timeout 300 python -m mixmla bench --paged --quick --peers none --paths bf16,fp8,mxfp4 --shape 256,1,8192 --shape 32,1,8192 --shape 64,1,1024 --out $OUT/paged > $OUT/paged.log 2>&1

# r6: the whole bench (FlashInfer's wheels did not travel: no peer but torch), then the GPU
# suite, cut by its 330 s timeout at about a third (147 passed, 4 skipped, none failed).
export PYTHONPATH=$PWD/src; timeout 320 python -m mixmla bench --quick --out $OUT/bench > $OUT/bench.log 2>&1
export PYTHONPATH=$PWD/src:$PWD/tests; timeout 330 python -m pytest -q -m gpu -x tests -p no:cacheprovider > $OUT/gpu_tests.log 2>&1
