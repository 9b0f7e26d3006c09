# Session 27, call 5 (carry .whl for pytest-xdist): the GPU tests of the Hopper kernels after the
# online-softmax step became one helper (decode.py and decode_tma.py), 8 processes.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target .peers .whl/pytest_xdist-*.whl .whl/execnet-*.whl > /dev/null 2>&1
export PYTHONPATH=$PWD/src:$PWD/.peers
timeout 200 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/test_hopper_gpu.py tests/test_paged_gpu.py \
  tests/test_hopper_decode.py tests/test_hopper_split.py tests/test_hopper_plan.py > $OUT/tests.log 2>&1; echo "tests rc=$?"
tail -4 $OUT/tests.log
