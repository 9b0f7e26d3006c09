# Run on the development machine (network to package registries) before the next session's
# device calls: the peers' wheels (docs/DEVELOPING.md, "Peers on a machine without network") and
# pytest-xdist, into the git-ignored .whl/ that `run` must carry (`carry: [".whl"]`).
set -eu
cd "$(dirname "$0")/../../../.."
for p in flashinfer_python==0.6.18.post1 apache_tvm_ffi==0.1.15.post2 nvidia_cudnn_frontend==1.32.0 \
         cuda_tile==1.7.0 nccl4py==0.6.0 nvidia_cutlass_dsl==4.8.1 nvidia_cutlass_dsl_libs_base==4.8.1 \
         pytest_xdist==3.8.0 execnet==2.1.2; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d .whl "$p"
done
du -sh .whl
