#!/usr/bin/env bash
# The prepared GPU check of issue 14, for a bare CUDA machine, in about 10 minutes.
#
#   bash scripts/gpu_check.sh            # from the repository root
#
# It runs, each step under its own time limit, printing everything and going on after a
# failure:
#   1. the machine: nvidia-smi, python, torch / CUDA, which engines import;
#   2. installs specexact (no network needed: --no-deps --no-index; its dependencies —
#      numpy, scipy, hypothesis, rich, matplotlib, jinja2, pytest — are expected on a CUDA
#      image), and any wheels under .whl/ (e.g. flashinfer-python, sglang, apache-tvm-ffi:
#      download them where pip works, see the device notes) into /tmp/site;
#   3. the CUDA tests of the decoders and of the GPU adapters (pytest -k cuda, and the
#      FlashInfer / SGLang adapter test files, which skip without their engine);
#   4. specexact audit --device cuda of the built-in decoder;
#   5. the FlashInfer audit (--sampler flashinfer), the SGLang audits (--sampler sglang:
#      the Triton chain kernel compiled for the GPU; --sampler sglang-tree: the CUDA tree
#      kernel), each only if its engine imports;
#   5b. vLLM end to end with specexact's tiny heads (--engine vllm --method eagle, eagle3,
#      medusa, mtp), if vllm imports;
#   5c. SGLang and LMDeploy end to end (--engine sglang: ngram, draft_model_greedy; --engine
#      lmdeploy: eagle3) and their engine adapters' tests, each only if its engine imports
#      (neither starts on a CPU: docs/engines/sglang.md, lmdeploy.md);
#   6. the verifier benchmark on CUDA (python -m benchmarks --quick --only verifier);
# then writes a summary (one line per step: name, exit status, seconds) to
# ${OUT:-reports/gpu}/gpu_check-summary.txt and the audits' JSON reports beside it.
#
# Exit status: 0 when every step that ran passed (a skipped step does not fail), else 1.
# Environment: SPECEXACT_GPU_AUDIT_BUDGET (seconds per audit, default 60),
# SPECEXACT_GPU_TOTAL_LIMIT (seconds for the whole script, default 570).

set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUTDIR=${OUT:-$ROOT/reports/gpu}
mkdir -p "$OUTDIR"
SUMMARY=$OUTDIR/gpu_check-summary.txt
: > "$SUMMARY"
BUDGET=${SPECEXACT_GPU_AUDIT_BUDGET:-60}
TOTAL=${SPECEXACT_GPU_TOTAL_LIMIT:-570}
START=$(date +%s)
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
FAILED=0

left() { echo $(( TOTAL - ($(date +%s) - START) )); }

# step NAME LIMIT_S COMMAND...: run with a time limit (never past the total), record the result.
step() {
    local name=$1 limit=$2; shift 2
    local rest; rest=$(left)
    if [ "$rest" -le 10 ]; then
        echo "SKIP $name: no time left" | tee -a "$SUMMARY"; return 0
    fi
    [ "$limit" -gt "$rest" ] && limit=$rest
    echo; echo "================ $name (limit ${limit}s) ================"
    local t0; t0=$(date +%s)
    timeout --kill-after=10 "$limit" "$@"
    local rc=$?
    local dt=$(( $(date +%s) - t0 ))
    if [ $rc -eq 0 ]; then
        echo "PASS $name rc=0 ${dt}s" | tee -a "$SUMMARY"
    else
        echo "FAIL $name rc=$rc ${dt}s" | tee -a "$SUMMARY"; FAILED=1
    fi
}

skip() { echo "SKIP $1: $2" | tee -a "$SUMMARY"; }

echo "================ machine ================"
nvidia-smi || echo "nvidia-smi not available"
$PY --version
$PY - <<'EOF'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
EOF
if ! $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    skip all "torch sees no CUDA device"; exit 1
fi

echo "================ install ================"
mkdir -p /tmp/site
if ls .whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && echo "installed wheels: $(ls .whl | tr '\n' ' ')"
fi
$PY -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site . \
    || { skip all "specexact did not install"; exit 1; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
SPECEXACT="$PY -m specexact"
$PY - <<'EOF'
import importlib
for name in ("specexact", "flashinfer", "sglang", "sgl_kernel", "triton", "vllm", "lmdeploy"):
    try:
        m = importlib.import_module(name)
        print(f"{name:10s} {getattr(m, '__version__', '?')}")
    except Exception as exc:  # noqa: BLE001 - reporting only
        print(f"{name:10s} not importable: {type(exc).__name__}: {str(exc)[:120]}")
EOF
has() { $PY -c "import $1" >/dev/null 2>&1; }

# 3. CUDA tests: the decoders' CUDA tests and the GPU adapters' tests (skip without their engine).
step "pytest decoders -k cuda" 120 $PY -m pytest -q -k cuda tests/decoders --ignore=tests/decoders/adapters
step "pytest GPU adapters" 150 $PY -m pytest -q tests/decoders/adapters/test_flashinfer.py \
    tests/decoders/adapters/test_sglang_tree.py tests/decoders/adapters/test_sglang.py

# 4. the built-in decoder's audit on CUDA.
step "audit builtin cuda" $(( BUDGET + 60 )) $SPECEXACT audit --device cuda --budget "$BUDGET" \
    --report-dir "$OUTDIR" --no-html --quiet

# 5. engine audits on CUDA.
if has flashinfer; then
    step "audit flashinfer cuda" $(( BUDGET + 90 )) $SPECEXACT audit --sampler flashinfer --device cuda \
        --budget "$BUDGET" --report-dir "$OUTDIR" --no-html --quiet
else
    skip "audit flashinfer cuda" "flashinfer does not import (carry flashinfer-python and its dependencies in .whl/)"
fi
if has sglang; then
    step "audit sglang (Triton chain kernel) cuda" $(( BUDGET + 90 )) $SPECEXACT audit --sampler sglang --device cuda \
        --budget "$BUDGET" --report-dir "$OUTDIR" --no-html --quiet
    if $PY -c "from specexact.decoders.adapters.sglang_tree import load_tree_kernel; load_tree_kernel()" >/dev/null 2>&1; then
        step "audit sglang-tree cuda" $(( BUDGET + 120 )) $SPECEXACT audit --sampler sglang-tree --device cuda \
            --budget "$BUDGET" --report-dir "$OUTDIR" --no-html --quiet
    else
        skip "audit sglang-tree cuda" "no tree_speculative_sampling_target_only (needs sgl_kernel, or SGLang's JIT with flashinfer headers and nvcc)"
    fi
else
    skip "audit sglang cuda" "sglang does not import (carry the sglang wheel and its imports in .whl/)"
fi

# 5b. vLLM end to end with specexact's tiny heads (issue 34): on the CPU route every speculative
# round's law is wrong (the expand_kernel finding, docs/engines/vllm.md), which hides the heads'
# own; on CUDA the law of each head method is checked (the enumerable case only, for time).
if has vllm; then
    for m in eagle eagle3 medusa mtp; do
        pair=llama-v64; [ "$m" = mtp ] && pair=qwen2-v64-h2
        step "audit vllm e2e $m cuda" $(( BUDGET + 120 )) env VLLM_ENABLE_V1_MULTIPROCESSING=0 $SPECEXACT audit \
            --engine vllm --method "$m" --pair "$pair" --case "e2e-$pair-$m-g2" --budget "$BUDGET" \
            --call-timeout 300 --report-dir "$OUTDIR" --no-html --quiet
    done
else
    skip "audit vllm e2e heads cuda" "vllm does not import (carry the vllm wheel and its imports in .whl/)"
fi

# 5c. SGLang and LMDeploy end to end (issue 34): neither engine starts on a CPU (docs/engines/sglang.md,
# lmdeploy.md, "End to end: why not on this CPU"), so their adapters first run here: the real-engine
# tests (output protocol, seeded reproducibility) and the enumerable case of each method.
if has sglang; then
    step "pytest e2e sglang cuda" 240 $PY -m pytest -q tests/decoders/engines/test_sglang.py
    for m in ngram draft_model_greedy; do
        step "audit sglang e2e $m cuda" $(( BUDGET + 120 )) $SPECEXACT audit --engine sglang --method "$m" \
            --case "e2e-llama-v64-$m-g2" --device cuda --budget "$BUDGET" --call-timeout 300 \
            --report-dir "$OUTDIR" --no-html --quiet
    done
else
    skip "audit sglang e2e cuda" "sglang does not import (carry the sglang wheel and its imports in .whl/)"
fi
if has lmdeploy; then
    step "pytest e2e lmdeploy cuda" 240 $PY -m pytest -q tests/decoders/engines/test_lmdeploy.py
    step "audit lmdeploy e2e eagle3 cuda" $(( BUDGET + 120 )) $SPECEXACT audit --engine lmdeploy --method eagle3 \
        --case "e2e-llama-v64-eagle3-g2" --device cuda --budget "$BUDGET" --call-timeout 300 \
        --report-dir "$OUTDIR" --no-html --quiet
else
    skip "audit lmdeploy e2e cuda" "lmdeploy does not import (carry the lmdeploy wheel and its imports in .whl/)"
fi

# 6. the verifier benchmark on CUDA.
step "benchmark verifier cuda" 150 $PY -m benchmarks --quick --only verifier --device cuda \
    --out "$OUTDIR/benchmarks" --no-transformers

echo; echo "================ summary ($(( $(date +%s) - START ))s) ================"
cat "$SUMMARY"
ls -la "$OUTDIR"
exit $FAILED
