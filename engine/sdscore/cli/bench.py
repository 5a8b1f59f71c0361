"""`sdscore bench [NAME ...]`: run the benchmark scripts of a source checkout's bench/ folder."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from sdscore.errors import SdscoreError


def bench_folder() -> Path:
    """bench/ of the checkout this package runs from (an editable install); wheels do not ship it."""
    folder = Path(__file__).resolve().parents[3] / "bench"
    if not (folder / "common.py").is_file():
        raise SdscoreError(
            f"no bench/ folder beside this installation ({folder}); the benchmarks ship with the source "
            f"checkout: run `pip install -e .` from it"
        )
    return folder


def bench_names(folder: Path) -> list[str]:
    """Benchmark scripts: the bench/*.py that run as scripts, except the demo-model trainer."""
    return sorted(p.stem for p in folder.glob("*.py")
                  if p.stem != "train_demo_model" and "__main__" in p.read_text(encoding="utf-8"))


def _cmd_bench(args: argparse.Namespace) -> int:
    folder = bench_folder()
    known = bench_names(folder)
    names = args.names or known
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SdscoreError(f"no benchmark named {', '.join(unknown)}; expected one of {', '.join(known)}")
    extra = [flag for flag, on in (("--quick", args.quick), ("--json", args.json)) if on]
    status = 0
    for name in names:
        began = time.perf_counter()
        code = subprocess.call([sys.executable, str(folder / f"{name}.py"), *extra])
        outcome = "ok" if code == 0 else f"exit status {code}"
        print(f"\n[sdscore bench] {name}: {outcome}, {time.perf_counter() - began:.0f} s", flush=True)
        status = max(status, code)
    return status


def add_bench_parser(sub) -> None:
    bench = sub.add_parser("bench", help="run benchmarks (the tables of bench/)")
    bench.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    bench.add_argument("--quick", action="store_true", help="small inputs (under a minute each on 2 cores)")
    bench.add_argument("--json", action="store_true", help="end each table with one JSON line")
    bench.set_defaults(func=_cmd_bench)
