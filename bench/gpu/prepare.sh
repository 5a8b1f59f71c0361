#!/usr/bin/env bash
# Downloads, here (with network), the cp312 manylinux x86_64 wheels of every package that sdscore,
# its CUDA tests and the GPU benches import at run time and that the lent GPU machine lacks, into
# the git-ignored folder .whl/ at the repository root; bench/gpu/run.sh installs them there with
# pip --no-index. The machine's own packages (torch, triton, transformers, numpy, scipy, pyarrow,
# numba, rich, httpx, jinja2, safetensors, click, h11, anyio, ...) are not carried: KINDS.md of the
# device tool lists them. Idempotent: a wheel already in .whl/ is not fetched again.
# Also renders the benches' TTS clips into .whl/tts/ (the GPU machine has no flite or espeak-ng).
# Usage: bash bench/gpu/prepare.sh   (from anywhere; PYTHON=... picks the pip to use)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEST="$ROOT/.whl"
PYTHON="${PYTHON:-python3}"                        # its pip downloads the wheels
BENCH_PYTHON="${BENCH_PYTHON:-$ROOT/.venv/bin/python}"  # the project's venv renders the clips
MAX_MIB=44  # the tree (about 6 MiB), these and the clips (5 MiB) travel in 64 MiB

# name==version: the versions the project's own venv is tested with.
WHEELS=(
  polars==2.1.0 polars-runtime-32==2.1.0          # sdscore's tables
  soundfile==0.14.0 cffi==2.1.1 pycparser==3.12   # audio I/O (soundfile loads libsndfile via cffi)
  soxr==1.1.0                                     # resampling peers and sdscore.audio fallbacks
  librosa==0.11.0 audioread==3.1.0 pooch==1.9.0 platformdirs==4.14.8 decorator==5.3.1  # the authors' loop
  fastapi==0.165.0 starlette==1.10.0 pydantic==2.14.4 pydantic-core==2.50.5
  annotated-types==0.7.0 typing-inspection==0.4.5 opentelemetry-api==1.45.2 typing-extensions==4.16.0
  uvicorn==0.54.0 httptools==0.9.0                # `sdscore serve`
  transformers==5.24.0  # the device's 5.17 has no Qwen2_5OmniThinkerModel, which the SDiaReward adapter loads
)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64
           manylinux2014_x86_64 manylinux_2_12_x86_64 manylinux2010_x86_64 manylinux1_x86_64)

mkdir -p "$DEST"
platform_args=()
for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done
for spec in "${WHEELS[@]}"; do
  name="${spec%%==*}"; version="${spec##*==}"
  stem="$(echo "$name" | tr '-' '_')"
  if compgen -G "$DEST/${stem}-${version}-*.whl*" >/dev/null || compgen -G "$DEST/${name}-${version}-*.whl*" >/dev/null; then
    continue
  fi
  tmp="$(mktemp -d)"
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platform_args[@]}" -d "$tmp" "$spec" 2> >(grep -v "is neither a file nor a directory" >&2)
  for wheel in "$tmp"/*.whl; do
    if [ "$(stat -c %s "$wheel")" -gt $(( 8 * 1048576 )) ] && [[ "$wheel" == *-none-any.whl ]]; then
      # a large pure-Python wheel travels as its members stored uncompressed, the whole xz-compressed
      # (run.sh unpacks it): transformers goes from 13.5 to 4.3 MB
      echo "prepare.sh: packing $(basename "$wheel") as .whl.xz (a minute or two)"
      "$PYTHON" -c 'import lzma, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, zipfile.ZipFile(sys.argv[1] + ".stored", "w", zipfile.ZIP_STORED) as o:
    for info in z.infolist():
        o.writestr(info, z.read(info.filename), compress_type=zipfile.ZIP_STORED)
with open(sys.argv[1] + ".stored", "rb") as f, open(sys.argv[2] + ".part", "wb") as out:
    out.write(lzma.compress(f.read(), preset=6))' "$wheel" "$DEST/$(basename "$wheel").xz"
      mv "$DEST/$(basename "$wheel").xz.part" "$DEST/$(basename "$wheel").xz"
    elif [ "$(stat -c %s "$wheel")" -gt $(( 8 * 1048576 )) ]; then
      # a large wheel is rewritten with LZMA-compressed members (pip reads them; the RECORD hashes
      # are of the unpacked files, so they still hold): polars' runtime goes from 54 to 33 MB
      echo "prepare.sh: repacking $(basename "$wheel") with LZMA (a few minutes)"
      "$PYTHON" -c 'import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, zipfile.ZipFile(sys.argv[2] + ".part", "w", zipfile.ZIP_LZMA) as o:
    for info in z.infolist():
        o.writestr(info, z.read(info.filename), compress_type=zipfile.ZIP_LZMA)' "$wheel" "$DEST/$(basename "$wheel")"
      mv "$DEST/$(basename "$wheel").part" "$DEST/$(basename "$wheel")"
    else
      mv "$wheel" "$DEST/"
    fi
  done
  rm -rf "$tmp"
done

# one version of each package: two would stop the whole install there
dupes="$(ls "$DEST"/*.whl "$DEST"/*.whl.xz 2>/dev/null | xargs -n1 basename | cut -d- -f1 | tr 'A-Z-' 'a-z_' | sort | uniq -d)"
if [ -n "$dupes" ]; then
  echo "prepare.sh: more than one version of: $dupes in $DEST; remove the stale wheels" >&2
  exit 1
fi
bytes="$(du -cb "$DEST"/*.whl "$DEST"/*.whl.xz 2>/dev/null | tail -1 | cut -f1)"
echo "prepare.sh: $(ls "$DEST"/*.whl "$DEST"/*.whl.xz 2>/dev/null | wc -l) wheels, $(( (bytes + 1048575) / 1048576 )) MiB in $DEST"
if [ "$bytes" -gt $(( MAX_MIB * 1048576 )) ]; then
  echo "prepare.sh: the wheels exceed $MAX_MIB MiB; the working tree travels at most 64 MiB" >&2
  exit 1
fi

# the benches' TTS clips (the GPU machine has no flite or espeak-ng), rendered once, kept as FLAC
"$BENCH_PYTHON" "$ROOT/bench/gpu/tts_clips.py" "$DEST/tts"
total="$(du -sb "$DEST" | cut -f1)"
echo "prepare.sh: $(( (total + 1048575) / 1048576 )) MiB in all in $DEST (wheels and $(ls "$DEST/tts" | wc -l) clips)"
