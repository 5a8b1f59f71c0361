#!/usr/bin/env bash
# Builds the WAV parser fuzzer (libFuzzer + AddressSanitizer + UBSan) into .fuzz/ and runs it.
#
#   csrc/fuzz/run_fuzzer.sh [SECONDS]     # default 300
#
# Needs clang with libFuzzer; on Debian bookworm: apt-get install -y clang libclang-rt-14-dev
# (set CLANGXX to pick another clang++). Starts from a generated seed corpus of valid WAVs of
# every supported subtype; findings go to .fuzz/artifacts/. Exits non-zero on any crash,
# sanitizer report or harness assertion.
set -euo pipefail

run_seconds="${1:-300}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$root/.fuzz"
clangxx="${CLANGXX:-}"
if [[ -z "$clangxx" ]]; then
  for candidate in clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
    if command -v "$candidate" >/dev/null 2>&1; then clangxx="$candidate"; break; fi
  done
fi
if [[ -z "$clangxx" ]]; then
  echo "run_fuzzer.sh: clang++ not found (apt-get install -y clang libclang-rt-14-dev)" >&2
  exit 2
fi

mkdir -p "$out/corpus" "$out/seeds" "$out/artifacts"
"$clangxx" -std=c++17 -g -O1 -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -I"$root/csrc" \
  "$root/csrc/fuzz/wav_fuzzer.cpp" \
  "$root/csrc/audio/wav_decoder.cpp" \
  "$root/csrc/audio/resampler.cpp" \
  "$root/csrc/audio/filter_bank.cpp" \
  "$root/csrc/audio/fir_kernels.cpp" \
  -o "$out/wav_fuzzer"

# Seed corpus: one small valid file per format/layout the decoder supports.
python3 - "$out/seeds" <<'PY'
import math, os, struct, sys

out_dir = sys.argv[1]
GUID_TAIL = bytes.fromhex("000000001000800000aa00389b71")  # KSDATAFORMAT_SUBTYPE_* bytes 2..15

def chunk(cid, body):
    return cid + struct.pack("<I", len(body)) + body + (b"\0" if len(body) % 2 else b"")

def samples(tag, bits, channels, frames=24):
    vals = [0.6 * math.sin(0.3 * i + c) for i in range(frames) for c in range(channels)]
    if tag == 3:
        return struct.pack("<%d%s" % (len(vals), "f" if bits == 32 else "d"), *vals)
    if bits == 8:
        return bytes(int(128 + 127 * v) for v in vals)
    scale = 2 ** (bits - 1) - 1
    return b"".join(int(v * scale).to_bytes(bits // 8, "little", signed=True) for v in vals)

def fmt_body(tag, bits, channels, rate=16000, extensible=False):
    align = channels * bits // 8
    head = struct.pack("<HHIIHH", 0xFFFE if extensible else tag, channels, rate, rate * align,
                       align, bits)
    if extensible:
        return head + struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", tag) + GUID_TAIL
    return head

def riff(chunks, magic=b"RIFF", size=None):
    body = b"WAVE" + b"".join(chunks)
    return magic + struct.pack("<I", len(body) if size is None else size) + body

seeds = {}
for tag, bits in [(1, 8), (1, 16), (1, 24), (1, 32), (3, 32), (3, 64)]:
    for channels in (1, 2):
        name = "%s%d_%dch" % ("pcm" if tag == 1 else "float", bits, channels)
        seeds[name] = riff([chunk(b"fmt ", fmt_body(tag, bits, channels)),
                            chunk(b"data", samples(tag, bits, channels))])
seeds["extensible_pcm16_6ch"] = riff([chunk(b"fmt ", fmt_body(1, 16, 6, extensible=True)),
                                      chunk(b"data", samples(1, 16, 6))])
seeds["extensible_float32"] = riff([chunk(b"fmt ", fmt_body(3, 32, 1, 44100, extensible=True)),
                                    chunk(b"data", samples(3, 32, 1))])
seeds["list_odd_chunks"] = riff([chunk(b"LIST", b"INFOISFT\x05\x00\x00\x00abcd\x00"),
                                 chunk(b"fmt ", fmt_body(1, 16, 1)), chunk(b"junk", b"x"),
                                 chunk(b"data", samples(1, 16, 1))])
data = samples(1, 24, 2)
seeds["streamed_size"] = riff([chunk(b"fmt ", fmt_body(1, 24, 2)),
                               b"data" + struct.pack("<I", 0xFFFFFFFF) + data], size=0xFFFFFFFF)
ds64 = struct.pack("<QQQI", 0, len(data), len(data) // 6, 0)
seeds["rf64"] = riff([chunk(b"ds64", ds64), chunk(b"fmt ", fmt_body(1, 24, 2)),
                      b"data" + struct.pack("<I", 0xFFFFFFFF) + data],
                     magic=b"RF64", size=0xFFFFFFFF)
for name, blob in seeds.items():
    with open(os.path.join(out_dir, name + ".wav"), "wb") as f:
        f.write(blob)
PY

# -timeout catches hangs; -rss_limit_mb catches runaway allocation from forged sizes.
# libFuzzer reads its RSS from getrusage's ru_maxrss, which Linux carries across fork + exec: a
# fuzzer exec'd straight from a big process (pytest with torch loaded) starts "using" that
# process's RSS and trips the limit at once. So it runs as a child of this small shell, not
# through exec. A small ASan quarantine keeps long runs near 80 MiB instead of ~400 MiB.
export ASAN_OPTIONS="${ASAN_OPTIONS:-quarantine_size_mb=16:malloc_context_size=5}"
"$out/wav_fuzzer" \
  -max_total_time="$run_seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$out/artifacts/" -print_final_stats=1 \
  "$out/corpus" "$out/seeds"
