"""Fuzzing the whole CLI: random corruptions of manifests, audio files and results files fed to every
`sdscore score` / `sdscore eval` command. Whatever the input, the CLI must answer with a message —
no traceback, exit code 0 (all rows scored), 1 (some rows failed) or 2 (usage / file-level refusal) —
and an output, when one is written, holds exactly one row per input row.

The cases come from a seeded generator, a fixed number per test (CASES, sized by what a case costs),
so every machine runs the same cases whatever its speed or load: a failure names its seed and case
and reproduces anywhere. `SDSCORE_FUZZ_SEED=N` draws other cases and `SDSCORE_FUZZ_SCALE=K` runs K
times as many (a longer fuzz, e.g. before a release).
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import traceback
from contextlib import redirect_stderr
from pathlib import Path

import polars as pl
import pytest
from sdscore.cli import main
from sdscore.manifests import read_manifest

from tree_state import tree_state

SEED = int(os.environ.get("SDSCORE_FUZZ_SEED", "20261124"))
SCALE = max(1, int(os.environ.get("SDSCORE_FUZZ_SCALE", "1")))
#: cases per test (times SCALE); a judge case computes blueprints (~2 s), the others take a fraction of a second
CASES = {"score-reward": 48, "score-consistency": 48, "score-judge": 12, "eval-reward": 48, "eval-consistency": 48,
         "eval-judge": 48, "eval-arena": 24, "outputs": 64}

#: protocol → (corpus manifest, id column, fast offline options, the fields whose audio is scored)
SCORE = {
    "reward": ("reward_pairs.parquet", "pair_id", [], ("chosen", "rejected")),
    "consistency": ("consistency.parquet", "instance_id", ["--embedder", "ge2e"], ("turn_paths",)),
    "judge": ("judge_items.parquet", "item_id", ["--judge", "rule"], ("audio1_path", "audio2_path")),
}
JUNK_VALUES = [None, "", "x" * 5000, -1, 0, 1e308, float("nan"), True, [], {}, [1, "a"], {"a": [None]},
               "../../etc/passwd", "/dev/zero", "\x00\x01", "💥", "[{not json", 2**63]


def _run(argv: list[str]) -> tuple[int, str]:
    """(exit code, stderr) of the CLI in process; an exception escaping main is a traceback."""
    err = io.StringIO()
    try:
        with redirect_stderr(err):
            code = main(argv)
    except SystemExit as exit_:  # argparse usage errors
        code = exit_.code if isinstance(exit_.code, int) else 2
    except BaseException:  # noqa: BLE001 - any escape is the defect this test looks for
        return -1, err.getvalue() + traceback.format_exc()
    return code, err.getvalue()


def _corrupt_bytes(data: bytes, rng: random.Random) -> bytes:
    how = rng.choice(["truncate", "flip", "zero-fill", "append-junk", "empty", "header-only"])
    if how == "truncate" and data:
        return data[: rng.randrange(len(data))]
    if how == "flip" and data:
        out = bytearray(data)
        for _ in range(rng.randint(1, 16)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)
    if how == "zero-fill" and data:
        start = rng.randrange(len(data))
        return data[:start] + bytes(min(len(data) - start, rng.randint(1, 4096))) + data[start + 4096 :]
    if how == "append-junk":
        return data + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    if how == "header-only":
        return data[:44]
    return b""


def _corrupt_rows(rows: list[dict], id_column: str, rng: random.Random) -> list:
    """A row-level corruption of a manifest's rows (each row a JSON object, or junk)."""
    rows = json.loads(json.dumps(rows))
    how = rng.choice(["junk-field", "drop-field", "duplicate-id", "not-an-object", "extra-field", "nested-junk"])
    row = rng.randrange(len(rows))
    if how == "junk-field":
        rows[row][rng.choice(list(rows[row]))] = rng.choice(JUNK_VALUES)
    elif how == "drop-field":
        del rows[row][rng.choice(list(rows[row]))]
    elif how == "duplicate-id":
        rows[row][id_column] = rows[(row + 1) % len(rows)][id_column]
    elif how == "not-an-object":
        rows[row] = rng.choice([[1, 2], "row", 3, None])
    elif how == "extra-field":
        rows[row]["unexpected"] = rng.choice(JUNK_VALUES)
    else:  # reach one level into a nested field (turn lists, path lists)
        nested = [k for k, v in rows[row].items() if isinstance(v, list) and v]
        if nested:
            field = rows[row][rng.choice(nested)]
            at = rng.randrange(len(field))
            if isinstance(field[at], dict) and field[at]:
                field[at][rng.choice(list(field[at]))] = rng.choice(JUNK_VALUES)
            else:
                field[at] = rng.choice(JUNK_VALUES)
    return rows


def _json_line(row) -> str:
    return json.dumps(row, allow_nan=True)


def _input_rows(path: Path) -> int | None:
    """Rows the manifest holds as an independent reader sees them (None: not countable that way)."""
    if path.suffix == ".jsonl":
        return sum(1 for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip())
    try:
        return pl.read_parquet(path).height
    except Exception:  # noqa: BLE001 - a corrupt Parquet has no row count to compare with
        return None


def _score_cases(protocol: str, corpus: Path, work: Path, rng: random.Random):
    """Yield (description, manifest path) of one random corruption at a time."""
    name, id_column, _, audio_fields = SCORE[protocol]
    rows = [json.loads(line) for line in read_manifest(corpus / name, protocol).write_ndjson().splitlines()][:4]
    clips = sorted(str(p) for p in (corpus / "audio").rglob("*.wav"))
    n = 0
    while True:
        n += 1
        case = work / f"case-{n}"
        case.mkdir()
        kind = rng.choice(["rows", "bytes", "audio", "audio", "format"])
        manifest = case / "m.jsonl"
        if kind == "rows":
            lines = [_json_line(r) for r in _corrupt_rows(rows, id_column, rng)]
            manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
            yield f"{kind}", manifest
        elif kind == "bytes":
            text = "\n".join(_json_line(r) for r in rows) + "\n"
            manifest.write_bytes(_corrupt_bytes(text.encode(), rng))
            yield f"{kind}", manifest
        elif kind == "audio":  # a corrupted copy of one of a row's real clips in its place
            texts = [_json_line(r) for r in rows]
            at = rng.randrange(len(rows))
            scored = json.dumps([rows[at].get(f) for f in audio_fields])
            used = [c for c in clips if json.dumps(c)[1:-1] in scored]
            if not used:
                continue
            source = rng.choice(used)
            bad = case / "clip.wav"
            bad.write_bytes(_corrupt_bytes(Path(source).read_bytes(), rng))
            texts[at] = texts[at].replace(json.dumps(source)[1:-1], json.dumps(str(bad))[1:-1])
            manifest.write_text("\n".join(texts) + "\n", encoding="utf-8")
            yield f"{kind} ({bad.stat().st_size} bytes)", manifest
        else:  # the same rows as Parquet with a column dropped or retyped, or a corrupt Parquet file
            frame = pl.DataFrame(rows)
            manifest = case / "m.parquet"
            choice = rng.choice(["drop", "retype", "corrupt"])
            column = rng.choice(frame.columns)
            if choice == "drop":
                frame = frame.drop(column)
            elif choice == "retype":
                frame = frame.with_columns(pl.lit(rng.choice(["7", "", "x"])).alias(column))
            frame.write_parquet(manifest)
            if choice == "corrupt":
                manifest.write_bytes(_corrupt_bytes(manifest.read_bytes(), rng))
            yield f"{kind}: {choice} {column}", manifest


def _check(argv, code, stderr, out: Path, expected_rows: int | None, what: str):
    assert code in (0, 1, 2), f"{what}: exit code {code}\n{stderr[-3000:]}"
    assert "Traceback" not in stderr, f"{what}: traceback on stderr\n{stderr[-3000:]}"
    if out.exists() and expected_rows is not None:
        written = pl.read_parquet(out).height
        assert written == expected_rows, f"{what}: {written} output rows for {expected_rows} input rows"


@pytest.fixture(scope="module")
def feature_cache(tiny_feature_cache):
    """The session's content cache of the tiny corpus (GE2E embeddings, blueprints) for this module's
    score runs: a clip's features are computed once, whichever run meets it first; every corrupted
    clip is new content, so each case still computes what it corrupted."""
    return tiny_feature_cache


@pytest.mark.parametrize("protocol", list(SCORE))
def test_score_survives_random_corruptions(protocol, tiny_corpus, tmp_path, feature_cache):
    rng = random.Random(f"{SEED}-{protocol}")
    _, _, options, _ = SCORE[protocol]
    cache = feature_cache
    tried, codes = 0, []
    for what, manifest in _score_cases(protocol, tiny_corpus, tmp_path, rng):
        out = manifest.with_name("out.parquet")
        argv = ["score", protocol, str(manifest), "--out", str(out), *options]
        if protocol != "reward":
            argv += ["--cache-dir", str(cache)]
        code, stderr = _run(argv)
        _check(argv, code, stderr, out, _input_rows(manifest) if code != 2 else None,
               f"seed {SEED} {protocol} case {tried + 1} [{what}] {manifest}")
        tried += 1
        codes.append(code)
        if tried == CASES[f"score-{protocol}"] * SCALE:
            break
    # the corruptions must reach the scorer, not only the file-level checks
    assert {1} <= set(codes), f"exit codes of {tried} cases: {sorted(codes)}"


#: eval protocol → the score run that makes its results (arena: results are battles)
EVALS = ["reward", "consistency", "judge", "arena"]


@pytest.fixture(scope="module")
def results_files(tiny_corpus, tmp_path_factory, feature_cache):
    """A real results file per protocol (arena: the corpus's battle table)."""
    folder = tmp_path_factory.mktemp("fuzz-results")
    files = {}
    for protocol, (name, _, options, _) in SCORE.items():
        files[protocol] = folder / f"{protocol}.parquet"
        cache = [] if protocol == "reward" else ["--cache-dir", str(feature_cache)]
        code, stderr = _run(["score", protocol, str(tiny_corpus / name), "--out", str(files[protocol]), *options,
                             *cache])
        assert code in (0, 1), stderr
    files["arena"] = tiny_corpus / "battles.parquet"
    return files


def _corrupt_results(frame: pl.DataFrame, rng: random.Random, case: Path) -> tuple[str, Path]:
    how = rng.choice(["drop", "retype", "nulls", "junk", "bytes", "csv", "jsonl", "empty"])
    column = rng.choice(frame.columns)
    path = case / "results.parquet"
    if how == "drop":
        frame = frame.drop(column)
    elif how == "retype":  # numbers and flags as text ("1.5", "true"), nested values as junk text
        text = pl.lit("junk") if frame.schema[column].is_nested() else pl.col(column).cast(pl.String)
        frame = frame.with_columns(text.fill_null("junk").alias(column))
    elif how == "nulls":
        frame = frame.with_columns(pl.lit(None).cast(frame.schema[column]).alias(column))
    elif how == "junk":
        frame = frame.with_columns(pl.lit(rng.choice(["nan", "-inf", "", "x", "1e999"])).alias(column))
    elif how == "empty":
        frame = frame.head(0)
    if how in ("csv", "jsonl"):
        flat = frame.select([c for c, t in frame.schema.items() if not t.is_nested()])
        path = case / f"results.{how}"
        flat.write_csv(path) if how == "csv" else flat.write_ndjson(path)
        path.write_bytes(_corrupt_bytes(path.read_bytes(), rng) if rng.random() < 0.5 else path.read_bytes())
    else:
        frame.write_parquet(path)
        if how == "bytes":
            path.write_bytes(_corrupt_bytes(path.read_bytes(), rng))
    return f"{how} {column}", path


@pytest.mark.parametrize("protocol", EVALS)
def test_eval_survives_random_corruptions(protocol, results_files, tmp_path, arena_few_bootstraps):
    rng = random.Random(f"{SEED}-eval-{protocol}")
    frame = pl.read_parquet(results_files[protocol])
    for tried in range(CASES[f"eval-{protocol}"] * SCALE):
        case = tmp_path / f"case-{tried}"
        case.mkdir()
        what, results = _corrupt_results(frame, rng, case)
        argv = ["eval", protocol, str(results), "--out", str(case / "metrics.json")]
        code, stderr = _run(argv)
        _check(argv, code, stderr, case / "none.parquet", None, f"seed {SEED} eval {protocol} case {tried} [{what}]")
        if code == 0:
            json.loads((case / "metrics.json").read_text())  # what was written is whole JSON
        shutil.rmtree(case)


# --- output options: hostile --out / --format / --format-out / --plot / --report values ---------------
def _output_world(root: Path, tiny_corpus: Path, results: Path) -> None:
    """Inputs in data/ (a 2-pair reward manifest as pairs.jsonl, results, metrics) beside things that
    are not sdscore's (a folder, a file) and links to the manifest."""
    data = root / "data"
    data.mkdir(parents=True)
    read_manifest(tiny_corpus / "reward_pairs.parquet", "reward").head(2).write_ndjson(data / "pairs.jsonl")
    shutil.copyfile(results, data / "results.parquet")
    (data / "metrics.json").write_text("{}\n")
    (root / "foreign").mkdir()
    (root / "foreign" / "keep.txt").write_text("the user's\n")
    (root / "foreign.txt").write_text("the user's\n")
    (root / "link.jsonl").symlink_to("data/pairs.jsonl")
    os.link(data / "pairs.jsonl", root / "hard.jsonl")


def _output_value(rng: random.Random, others: list[str]) -> str:
    """A path an output option could be given: hostile most of the time, sometimes a fresh one."""
    pool = ["data/pairs.jsonl", "data", ".", "", "./", "foreign", "foreign.txt", "link.jsonl", "hard.jsonl",
            "data/results.parquet", "data/metrics.json", "foreign/keep.txt", "new/x.parquet", "new/x.jsonl",
            "new/x_scp", "new/plot.png", "new/report.html", "data/pairs.parquet", "data/new.json", *others]
    return rng.choice(pool)


@pytest.fixture(scope="module")
def reward_results(results_files):
    """Results of `score reward` on the tiny corpus (the eval / report input of the cases below): the
    eval fuzz's file, the same command's output, which the cases only copy."""
    return results_files["reward"]


def test_output_options_never_delete_or_overwrite(reward_results, tiny_corpus, tmp_path, monkeypatch):
    """Random output paths for score / eval / report: no traceback, and no file that existed before is
    deleted or changed (outputs may only be new files, or a file passed with --overwrite that is not
    an input)."""
    rng = random.Random(f"{SEED}-outputs")
    tried, codes = 0, []
    while tried < CASES["outputs"] * SCALE:
        root = tmp_path / f"case-{tried}"
        _output_world(root, tiny_corpus, reward_results)
        monkeypatch.chdir(root)
        out = _output_value(rng, [])
        command = rng.choice(["score", "score", "eval", "report"])
        if command == "score":
            argv = ["score", "reward", "data/pairs.jsonl", "--out", out]
            if rng.random() < 0.8:
                argv += ["--format", rng.choice(["parquet", "jsonl", "versa", "scp"])]
            if rng.random() < 0.7:
                argv += ["--format-out", _output_value(rng, [out, out + ".parts", out + ".lock"])]
        elif command == "eval":
            argv = ["eval", "reward", "data/results.parquet", "--out", out]
            for flag in ("--plot", "--report"):
                if rng.random() < 0.5:
                    argv += [flag, _output_value(rng, [out])]
        else:
            argv = ["report", "--protocol", "reward", "data/results.parquet", "--metrics", "data/metrics.json",
                    "--out", out]
        overwrite = rng.random() < 0.3
        argv += ["--overwrite"] if overwrite else []
        before = tree_state(root)
        code, stderr = _run(argv)
        after = tree_state(root)
        what = f"seed {SEED} outputs case {tried} {argv}"
        assert code in (0, 1, 2), f"{what}: exit code {code}\n{stderr[-3000:]}"
        assert "Traceback" not in stderr, f"{what}: traceback\n{stderr[-3000:]}"
        replaced = {path for path, state in before.items() if after.get(path) != state}
        # --overwrite may replace a plain file that is not an input of the command (nor a hard link
        # to one); nothing else that existed may change or go
        inputs = {"score": {"data/pairs.jsonl", "hard.jsonl"}, "eval": {"data/results.parquet"},
                  "report": {"data/results.parquet", "data/metrics.json"}}[command]
        allowed = {p for p, state in before.items() if state != "dir" and not state.startswith("link:")
                   and p not in inputs} if overwrite else set()
        assert replaced <= allowed, f"{what}: changed or deleted {sorted(replaced - allowed)}\n{stderr[-2000:]}"
        if code == 2:
            assert after == before, f"{what}: a refused run changed the tree\n{stderr[-2000:]}"
            assert len(stderr.strip().splitlines()) == 1, f"{what}: the error is not one line\n{stderr}"
        codes.append(code)
        tried += 1
        monkeypatch.chdir(tmp_path)
        shutil.rmtree(root)
    assert 0 in codes and 2 in codes, f"exit codes of {tried} cases: {sorted(codes)}"
