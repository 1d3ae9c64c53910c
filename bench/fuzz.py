"""The long fuzzing run: many more inputs than CI's tests/test_fuzz.py and tests/test_fuzz_http.py, counted.

    .venv/bin/python bench/fuzz.py [--reader 20000] [--handler 1000] [--http 100] [--seed 1]

  reader   random and mutated byte streams into the Wyoming event reader (in process)
  handler  event sequences against a server started here (Whisper base and tiny.en, Piper joe), each followed
           by `describe` on a new connection; the server log must stay free of tracebacks
  http     schemathesis against the server's /api/openapi.json, every operation, `--max-examples` each
Prints how many inputs each part tried and every failure (hypothesis shrinks it first); BENCHMARKS.md records runs.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

import hypothesis  # noqa: E402
from fuzz_strategies import byte_streams, event_sequences  # noqa: E402
from helpers import assert_clean_log, start_server  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from test_fuzz import check_handler, check_reader  # noqa: E402
from test_fuzz_http import CHECKS  # noqa: E402


def run(name: str, examples: int, seed: int, strategy, check) -> tuple[int, str | None]:
    tried = 0

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def fuzz(value) -> None:
        nonlocal tried
        tried += 1
        check(value)

    started = time.monotonic()
    failure = None
    try:
        hypothesis.seed(seed)(fuzz)()
    except Exception:
        failure = traceback.format_exc()
    print(f"{name}: {tried} inputs in {time.monotonic() - started:.0f} s, {'FAILED' if failure else 'no failure'}")
    if failure:
        print(failure)
    return tried, failure


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reader", type=int, default=20000)
    parser.add_argument("--handler", type=int, default=1000)
    parser.add_argument("--http", type=int, default=100, help="schemathesis examples per operation")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    failed = False
    if args.reader:
        failed |= run("reader", args.reader, args.seed, byte_streams, check_reader)[1] is not None
    if not (args.handler or args.http):
        return int(failed)
    with tempfile.TemporaryDirectory(prefix="wis-fuzz-") as folder:
        work = Path(folder)
        server = start_server(
            ["--data-dir", str(work / "data"), "--asr-model", "base", "--asr-model", "tiny.en"]
            + ["--voice", "en_US-joe-medium", "--max-audio-seconds", "60"],
            work / "server",
        )
        try:
            if args.handler:
                outcome = run("handler", args.handler, args.seed, event_sequences, lambda e: check_handler(server, e))
                failed |= outcome[1] is not None
            if args.http:
                started = time.monotonic()
                result = subprocess.run(
                    [str(Path(sys.executable).with_name("schemathesis")), "run", server.http_url + "/api/openapi.json"]
                    + ["--checks", CHECKS, "--max-examples", str(args.http), "--seed", str(args.seed)]
                    + ["--request-timeout", "120", "--no-color"],
                    capture_output=True,
                    text=True,
                    cwd=work,
                )
                lines = result.stdout.splitlines()
                summary = [line for line in lines if re.search(r"cases|passed|failed|error", line, re.I)]
                print(f"http: schemathesis exit {result.returncode} in {time.monotonic() - started:.0f} s")
                print("\n".join(summary[-15:]) if result.returncode == 0 else result.stdout[-8000:])
                failed |= result.returncode != 0
        finally:
            server.stop()
        try:
            assert_clean_log(server.log)
            print("server log: clean")
        except AssertionError as err:
            print(f"server log: {str(err)[:4000]}")
            failed = True
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
