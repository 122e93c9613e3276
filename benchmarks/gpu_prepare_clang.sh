#!/usr/bin/env bash
# A third part for ../shared/gpu/prepare.sh's two: Warp's CPU kernel compiler (warp/bin/warp-clang.so,
# 69 MB), which prepare.sh leaves out. Without it every test that compares CUDA with Warp's CPU device
# (the `tests` stage of benchmarks/gpu_checks.sh) fails with "'NoneType' object has no attribute
# 'wp_compile_cpp'". Run here once, from the project root, after prepare.sh (same warp-lang version):
#
#   bash benchmarks/gpu_prepare_clang.sh            # fills .gpu/c (21 MB, git-ignored with .gpu/)
#
# Then on the GPU machine, right after the two install commands, a third one with `.gpu/c` carried:
#   bash .gpu/c/install_c.sh && export PYTHONPATH=$PWD:/tmp/site && bash benchmarks/gpu_checks.sh tests
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
WARP=${WARP:-warp-lang==1.19.0}
[ -d .gpu/a ] || { echo "run ../shared/gpu/prepare.sh first (.gpu/a is missing)" >&2; exit 2; }
dl=$(mktemp -d); trap 'rm -rf "$dl"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dl" "$WARP"
(cd "$dl" && unzip -q warp_lang-*.whl 'warp/bin/warp-clang.so')
rm -rf .gpu/c; mkdir -p .gpu/c
zstd -q -19 --long=27 -T0 "$dl/warp/bin/warp-clang.so" -o .gpu/c/clang.zst
sha256sum "$dl/warp/bin/warp-clang.so" | cut -c1-64 > .gpu/c/clang.sha256
cat > .gpu/c/install_c.sh <<'INNER'
#!/usr/bin/env bash
# Third command on the GPU machine (.gpu/c carried), after install_a.sh and install_b.sh: warp-clang.so into /tmp/site
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ -d /tmp/site/warp/bin ] || { echo "install_a.sh and install_b.sh first" >&2; exit 3; }
PYTHONPATH=/tmp/site python3 -c "import sys, zstandard; zstandard.ZstdDecompressor(max_window_size=2**31).copy_stream(open(sys.argv[1], 'rb'), open('/tmp/site/warp/bin/warp-clang.so', 'wb'))" "$here/clang.zst"
echo "$(cat "$here/clang.sha256")  /tmp/site/warp/bin/warp-clang.so" | sha256sum -c --quiet
echo "warp-clang installed"
INNER
chmod +x .gpu/c/install_c.sh
du -sh .gpu/c
