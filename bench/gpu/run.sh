#!/usr/bin/env bash
# The GPU run in one command: installs the carried wheels, builds sdscore (its C++ core too) from
# this tree, runs the CUDA tests, then the GPU benches; every log, JSON table and a GPU trace go
# to OUTDIR. Each stage runs under its own time budget (and the whole under SDSCORE_GPU_RUN_TOTAL
# seconds, 540 by default) and prints exactly one line
#     STAGE <name> <ok|skipped|failed|timeout> <seconds> <detail>
# also when it fails or times out; a stage with no CUDA device stops after its CUDA check
# (status skipped) or runs only its CPU part. See bench/gpu/README.md.
#
# Usage (repository root or anywhere):  bash bench/gpu/run.sh OUTDIR
# Writes OUTDIR/summary.txt (the STAGE lines), OUTDIR/results.json (stages and bench tables),
# OUTDIR/logs.tar.gz (every stage's log, the pytest junit XML) and OUTDIR/gpu-trace.csv
# (nvidia-smi every 500 ms, where nvidia-smi exists); each is rewritten after every stage.
#
# Environment: PYTHON (default python3); SDSCORE_GPU_RUN_TOTAL (seconds for all stages);
# SDSCORE_GPU_RUN_STAGES (comma list: run only these); SDSCORE_GPU_RUN_BUDGET_<STAGE> (seconds,
# stage name upper-cased with _ for -); SDSCORE_GPU_RUN_CPU_BENCHES=1 (no CUDA: run each bench
# --quick on the CPU instead of skipping it). For this script's own tests: SDSCORE_GPU_RUN_DRY=1
# (each stage stops after its CUDA check), SDSCORE_GPU_RUN_FAIL / SDSCORE_GPU_RUN_HANG (comma
# lists of stages forced to fail / to hang after their CUDA check).
set -u

# the benches in the order of what the issue's goals need most: a stage that finds too little of the
# total left is cut short (or skipped), so the superseded short-clip reward rows come last
STAGES=(env wheels build tests bench-kernels bench-reward-real bench-reward-paths bench-asr bench-serve bench-reward)
declare -A BUDGET=([env]=45 [wheels]=90 [build]=180 [tests]=200 [bench-kernels]=90 [bench-reward-real]=170
                   [bench-reward-paths]=90 [bench-asr]=100 [bench-serve]=150 [bench-reward]=240)
# the CUDA tests: the kernel parity files and every file with a CUDA-only test
TEST_FILES=(tests/test_kernels_pooling.py tests/test_kernels_similarity.py tests/test_kernels_gelu.py
            tests/test_kernels_span_attention.py tests/test_models_packed_attention.py
            tests/test_models_compact.py tests/test_runtime_batching_tokens.py
            tests/test_models_whisper_log_mel.py tests/test_models_qwen_audio_tower.py
            tests/test_kernels_decoder.py tests/test_models_fused_decoder.py
            tests/test_models_prefix_continuation.py tests/test_torch_resampler.py
            tests/test_reward_device_waveforms.py)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg
export SDSCORE_TTS_CACHE="$ROOT/.whl/tts"

in_list() {  # in_list NAME "a,b,c"
  [[ ",$2," == *",$1,"* ]]
}

cuda_check() {  # prints one line; exit 0 when a CUDA device is usable
  "$PY" - <<'EOF'
import sys
try:
    import torch
except Exception as error:  # the stage's own command reports it too
    print(f"cuda check: torch does not import: {error}")
    sys.exit(2)
if not torch.cuda.is_available():
    print(f"cuda check: no CUDA device (torch {torch.__version__})")
    sys.exit(1)
p = torch.cuda.get_device_properties(0)
print(f"cuda check: {p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, "
      f"{p.total_memory / 2**30:.0f} GiB, torch {torch.__version__}, CUDA {torch.version.cuda}")
EOF
}

detail() { echo "DETAIL: $*"; }

# ---- the stages: each runs in its own process (run.sh --stage NAME) under `timeout` ---------------

stage_env() {
  uname -a; nproc; free -g 2>/dev/null | head -2
  command -v nvidia-smi >/dev/null && nvidia-smi
  command -v nvcc >/dev/null && nvcc --version | tail -2
  "$PY" - <<'EOF'
import sys
from importlib import metadata
print("python", sys.version.split()[0], sys.executable)
for name in ("torch", "triton", "transformers", "numpy", "scipy", "pyarrow", "cupy-cuda13x", "onnxruntime",
             "scikit-build-core", "pybind11", "cmake", "ninja", "numba", "pytest", "pytest-timeout"):
    try:
        print(f"  {name} {metadata.version(name)}")
    except metadata.PackageNotFoundError:
        print(f"  {name} not installed")
EOF
  detail "$(cuda_check 2>&1 | tail -1)"
}

stage_wheels() {
  if ! compgen -G "$ROOT/.whl/*.whl" >/dev/null; then
    detail "no wheels in .whl/: run bench/gpu/prepare.sh where pip reaches PyPI and carry .whl"
    return 1
  fi
  local packed=()  # a large pure-Python wheel travels xz-compressed: unpack it beside the site folder
  mkdir -p "$SITE.xz"
  for f in "$ROOT"/.whl/*.whl.xz; do
    [ -e "$f" ] || continue
    "$PY" -c 'import lzma, sys; open(sys.argv[2], "wb").write(lzma.open(sys.argv[1]).read())' \
      "$f" "$SITE.xz/$(basename "${f%.xz}")" || { detail "cannot unpack $f"; return 1; }
    packed+=("$SITE.xz/$(basename "${f%.xz}")")
  done
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$ROOT"/.whl/*.whl "${packed[@]}" || { detail "pip install of the carried wheels failed"; return 1; }
  rm -rf "$SITE.xz"
  "$PY" -c "import polars, soundfile, soxr, librosa, fastapi, uvicorn, pydantic, httptools, transformers; transformers.Qwen2_5OmniThinkerModel; print('imports ok, transformers', transformers.__version__)" \
    || { detail "a carried package does not import"; return 1; }
  detail "$(ls "$ROOT"/.whl/*.whl "$ROOT"/.whl/*.whl.xz 2>/dev/null | wc -l) wheels into $SITE"
}

stage_build() {
  export CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)"
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$ROOT" || { detail "building sdscore (scikit-build-core, CMake) failed"; return 1; }
  (cd /tmp && "$PY" -c "import sdscore, sdscore._core, sdscore._native, sdscore.kernels
print('sdscore from', sdscore.__file__); print('_core', sdscore._core.__file__)") \
    || { detail "sdscore._core does not import"; return 1; }
  detail "sdscore._core built from source into $SITE"
}

stage_tests() {
  local args=(-q -p no:cacheprovider -o addopts= -rs "${TEST_FILES[@]}")
  if [ "$HAVE_CUDA" = 0 ]; then
    "$PY" -m pytest --collect-only "${args[@]}" > "$LOGS/tests-collect.txt" 2>&1
    local rc=$? last; last="$(grep -E 'tests? (collected|selected)|error' "$LOGS/tests-collect.txt" | tail -1)"
    cat "$LOGS/tests-collect.txt"
    [ $rc = 0 ] || { detail "collection failed: $last"; return 1; }
    detail "no CUDA device: $last, not run"
    return 77
  fi
  "$PY" -c "import pytest_timeout" 2>/dev/null && args=(--timeout 150 "${args[@]}")
  "$PY" -m pytest --junitxml="$LOGS/tests-junit.xml" "${args[@]}" 2>&1 | tee "$LOGS/tests-pytest.txt"
  local rc=${PIPESTATUS[0]}
  detail "$(grep -E '(passed|failed|error)' "$LOGS/tests-pytest.txt" | tail -1)"
  return "$rc"
}

bench() {  # bench SCRIPT GPU-ARGS... [-- CPU-ARGS...]: on CUDA with GPU-ARGS; else skipped (or
           # --quick CPU-ARGS on the CPU)
  local script="$1"; shift
  local gpu=() cpu=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do gpu+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift && cpu=("$@")
  set -- "${gpu[@]}"
  if [ "$HAVE_CUDA" = 1 ]; then
    "$PY" "$ROOT/$script" "$@" --json
  elif [ "${SDSCORE_GPU_RUN_CPU_BENCHES:-0}" = 1 ]; then
    set -- --quick "${cpu[@]}" "(on the CPU)"
    "$PY" "$ROOT/$script" --quick "${cpu[@]}" --json
  else
    "$PY" "$ROOT/$script" --help >/dev/null || { detail "$script does not import"; return 1; }
    detail "no CUDA device: $script imports, not run"
    return 77
  fi
  local rc=$?
  [ $rc = 0 ] && detail "$script${*:+ $*} done" || detail "$script exited $rc"
  return $rc
}

stage_bench-kernels() { bench bench/kernels.py; }
stage_bench-reward() { bench bench/reward.py --quick; }  # .whl/tts holds the --quick clips
# 3B- and 7B-shaped bf16 thinkers, 30-s and mixed 2-30 s clips (4 pairs each), a 460-token prompt
stage_bench-reward-real() { bench bench/reward.py --realistic --quick -- --realistic; }
# varlen vs padded prefix continuation, fused vs unfused decoder (tiny, small fp32, 3B-shaped bf16)
stage_bench-reward-paths() { bench bench/reward.py --paths --quick -- --paths; }
# Whisper-large-v3-shaped fp16: 32 files, 24 tokens each, batched vs per-file generate
stage_bench-asr() { bench bench/asr.py --device cuda; }
# the micro-batcher and `sdscore serve` with the 3B-shaped model (each process builds it: ~7 GB bf16)
stage_bench-serve() { bench bench/serve.py --device cuda --model omni-3b --requests 128 --repeats 1 \
                        -- --model omni-tiny --requests 32; }

run_one_stage() {  # the body of `run.sh --stage NAME`
  local name="$1"
  local check; check="$(cuda_check 2>&1)"
  local check_rc=$?
  echo "$check"
  HAVE_CUDA=$([ $check_rc = 0 ] && echo 1 || echo 0)
  if in_list "$name" "${SDSCORE_GPU_RUN_FAIL:-}"; then detail "forced to fail (SDSCORE_GPU_RUN_FAIL)"; exit 3; fi
  if in_list "$name" "${SDSCORE_GPU_RUN_HANG:-}"; then detail "forced to hang (SDSCORE_GPU_RUN_HANG)"; sleep 100000; fi
  if [ "${SDSCORE_GPU_RUN_DRY:-0}" = 1 ]; then detail "dry run after the CUDA check: ${check#cuda check: }"; exit 77; fi
  "stage_$name"
  exit $?
}

if [ "${1:-}" = "--stage" ]; then
  cd "$ROOT" || exit 2
  run_one_stage "$2"
fi

# ---- the driver ------------------------------------------------------------------------------------

if [ $# -ne 1 ] || [[ "$1" == -* ]]; then
  echo "usage: bash bench/gpu/run.sh OUTDIR" >&2
  exit 2
fi
mkdir -p "$1" || exit 2
OUTDIR="$(cd "$1" && pwd)"
for f in summary.txt results.json logs.tar.gz gpu-trace.csv; do
  if [ -e "$OUTDIR/$f" ]; then
    echo "run.sh: $OUTDIR/$f exists; give an empty or new OUTDIR" >&2
    exit 2
  fi
done
cd "$ROOT" || exit 2
TOTAL="${SDSCORE_GPU_RUN_TOTAL:-540}"
MADE_SITE=""
if [ -z "${SDSCORE_GPU_SITE:-}" ]; then MADE_SITE="$(mktemp -d /tmp/sdscore-gpu-site.XXXXXX)"; fi
export SITE="${SDSCORE_GPU_SITE:-$MADE_SITE}"
export LOGS="$(mktemp -d /tmp/sdscore-gpu-logs.XXXXXX)"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PYTHON="$PY"
STAGE_TSV="$LOGS/stages.tsv"
: > "$STAGE_TSV"

TRACE_PID=""
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,utilization.memory,memory.used,power.draw,clocks.sm,temperature.gpu \
    --format=csv -lms 500 > "$OUTDIR/gpu-trace.csv" 2> "$LOGS/nvidia-smi-trace.err" &
  TRACE_PID=$!
fi

pack() {  # rewrite the outputs from what has been logged so far
  "$PY" "$ROOT/bench/gpu/collect.py" "$LOGS" "$OUTDIR/results.json" >> "$LOGS/collect.err" 2>&1 \
    || python3 "$ROOT/bench/gpu/collect.py" "$LOGS" "$OUTDIR/results.json" >> "$LOGS/collect.err" 2>&1
  tar czf "$OUTDIR/logs.tar.gz.part" -C "$LOGS" . && mv "$OUTDIR/logs.tar.gz.part" "$OUTDIR/logs.tar.gz"
}

finish() {  # everything is in OUTDIR now: the folders this run made go
  [ -n "$TRACE_PID" ] && kill "$TRACE_PID" 2>/dev/null
  pack
  rm -rf "$LOGS" ${MADE_SITE:+"$MADE_SITE" "$MADE_SITE.xz"}
}
trap finish EXIT
trap 'exit 130' INT TERM

summary() {  # summary NAME STATUS SECONDS DETAIL
  local line="STAGE $1 $2 $3 ${4:-}"
  echo "$line"
  echo "$line" >> "$OUTDIR/summary.txt"
}

START=$(date +%s.%N)
for name in "${STAGES[@]}"; do
  if [ -n "${SDSCORE_GPU_RUN_STAGES:-}" ] && ! in_list "$name" "$SDSCORE_GPU_RUN_STAGES"; then
    continue
  fi
  key="SDSCORE_GPU_RUN_BUDGET_$(echo "$name" | tr 'a-z-' 'A-Z_')"
  budget="${!key:-${BUDGET[$name]}}"
  left=$(awk -v s="$START" -v now="$(date +%s.%N)" -v t="$TOTAL" 'BEGIN { printf "%d", t - (now - s) }')
  log="$LOGS/$name.log"
  if [ -z "${!key:-}" ] && [ "$left" -lt 10 ]; then
    summary "$name" skipped 0.0 "no time left of the ${TOTAL}-s run"
    printf '%s\tskipped\t0\t0\t%s\n' "$name" "no time left" >> "$STAGE_TSV"
    pack
    continue
  fi
  [ -z "${!key:-}" ] && [ "$left" -lt "$budget" ] && budget=$left
  echo "== stage $name (budget ${budget} s) ==" >&2
  t0=$(date +%s.%N)
  timeout -k 10 "$budget" bash "$ROOT/bench/gpu/run.sh" --stage "$name" > "$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  last="$(grep '^DETAIL: ' "$log" | tail -1 | cut -c9- | tr -s ' \t' '  ')"
  case $rc in
    0) status=ok ;;
    77) status=skipped ;;
    124|137) status=timeout; last="over its ${budget}-s budget${last:+; last: $last}" ;;
    *) status=failed; last="exit $rc${last:+: $last}"
       [ -z "$(grep '^DETAIL: ' "$log")" ] && last="$last; log ends: $(tail -1 "$log" | cut -c1-160)" ;;
  esac
  summary "$name" "$status" "$seconds" "$last"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$t0" "$t1" "$last" >> "$STAGE_TSV"
  pack
done
