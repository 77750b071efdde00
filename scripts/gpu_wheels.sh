#!/usr/bin/env bash
# Fill .whl/ with the wheels scripts/gpu_check.sh installs on a CUDA machine that has no
# network (Python 3.12, x86-64; the CUDA image already holds torch, triton, numpy, scipy,
# requests, psutil, pillow, tqdm, aiohttp, packaging, pydantic-core may be missing).
# Run where pip reaches the index, from the repository root: bash scripts/gpu_wheels.sh
# .whl/ must be ignored by git (echo /.whl/ >> .git/info/exclude) and, on the device tool,
# named in `carry`. flashinfer-python (about 100 MB) exceeds what one device call carries
# (64 MiB), so it is not fetched here; its audit step then reports SKIP.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64)
# sglang's chain kernel module imports these (found by importing it in a bare environment).
for pkg in sglang==0.5.23 orjson pybase64 starlette msgspec pyzmq pydantic pydantic-core annotated-types \
           typing-inspection ipython jedi parso traitlets pexpect ptyprocess prompt-toolkit wcwidth \
           decorator matplotlib-inline stack-data executing asttokens pure-eval ipython-pygments-lexers; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${PLAT[@]}" -d .whl "$pkg"
done
du -sh .whl
