# Session 29, call 6 (carry .whl): on an H200, host cost per call (issue 12's table); on any other
# card, the four reliability files that call 2's limit cut (test_validate, test_reliability,
# test_property, test_kernel_configs, 8 processes).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  H=$OUT/host; mkdir -p $H
  PYTHONPATH=$PWD/src timeout 200 python bench/host_cost.py --out $H --calls 80 --shapes 4x1024,64x1024,256x1024 > $H/host.log 2>&1; echo "host rc=$?"
  tail -22 $H/host.log
else
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target .peers .whl/pytest_xdist-*.whl \
    .whl/execnet-*.whl > /dev/null 2>&1
  PYTHONPATH=$PWD/src:$PWD/.peers timeout 200 python3 -m pytest tests/test_validate.py tests/test_reliability.py tests/test_property.py \
    tests/test_kernel_configs.py -q -rfEx -p no:cacheprovider -n 8 > $OUT/reliability.log 2>&1; echo "reliability rc=$?"
  tail -4 $OUT/reliability.log
fi
