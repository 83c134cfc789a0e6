"""Benchmark: every real public log of the corpus through converge and its JSON, compare (the
log with itself) and its JSON, watch --once and its JSON, checked against its recorded
expectation, and watch's and compare's answers against converge's.

    python benchmarks/bench_wild.py                            # shared/wild
    python benchmarks/bench_wild.py --root shared/wild_heldout # the held-out set
    python benchmarks/bench_wild.py --fetched /work/fetched    # local binary files (not committed)
    python benchmarks/bench_wild.py --draft new.toml           # entries for unrecorded logs
    python benchmarks/bench_wild.py --options                  # watch as converge, other options

Prints, per root: the logs holding a per-step loss or accuracy (expectation ``read``) and the
share read with no flags by all six commands; the others (expectation ``error``) and the
share that get one clear line; tracebacks (must be 0) and timeouts; then every item that
differs from its expectation. Logs without a recorded expectation are classified by what they
got (and listed), so a new corpus can be read before anyone records it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.diag.wild_harness import (
    EXPECTATIONS,
    ROOT,
    discover,
    draft_entry,
    gives_one_clear_line,
    indexed,
    load_expectations,
    option_problems,
    problems,
    reads_with_no_flags,
    run_item,
)


def share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.1f}%)" if whole else "0/0"


def bench(
    root: Path, expectations_file: Path, timeout: float, draft: Path | None, verbose: bool
) -> bool:
    expectations = load_expectations(expectations_file)
    items = indexed(root) or discover(root)
    holding = read_ok = others = clear = tracebacks = timeouts = 0
    unrecorded, differing, drafts = [], [], []
    start = time.perf_counter()
    for item in items:
        result = run_item(root, item, timeout)
        expectation = expectations.get(item)
        kinds = result.kinds()
        tracebacks += "traceback" in kinds
        timeouts += "timeout" in kinds
        expect = (
            expectation.expect
            if expectation
            else ("read" if reads_with_no_flags(result) else "error")
        )
        if expectation is None:
            unrecorded.append(item)
            drafts.append(draft_entry(result))
        issues = problems(expectation, result)
        if expect == "read":
            holding += 1
            read_ok += reads_with_no_flags(result) and not issues
        else:
            others += 1
            clear += gives_one_clear_line(result) and not issues
        if issues:
            differing.append((item, issues))
        if verbose:
            print(
                f"  {item}: {sorted(kinds)} windows={result.windows} "
                f"metrics={list(result.metrics)}",
                flush=True,
            )
    seconds = time.perf_counter() - start
    print(f"{root}: {len(items)} logs in {seconds:.0f} s")
    print(
        f"  hold a per-step loss or acc: {holding}; read with no flags: {share(read_ok, holding)}"
    )
    print(f"  others: {others}; one clear line: {share(clear, others)}")
    print(f"  tracebacks: {tracebacks}; timeouts: {timeouts}")
    if unrecorded:
        print(
            f"  without a recorded expectation ({len(unrecorded)}; classified by outcome): "
            + ", ".join(unrecorded[:20])
            + (" ..." if len(unrecorded) > 20 else "")
        )
    for item, issues in differing:
        print(f"  DIFFERS {item}: " + "; ".join(issues))
    if draft is not None and drafts:
        draft.write_text("\n".join(drafts))
        print(f"  {len(drafts)} draft entries written to {draft}")
    return tracebacks == 0 and timeouts == 0


def bench_options(root: Path, timeout: float) -> bool:
    """watch against converge under each option set, on every log of ``root`` that reads."""
    compared, differing = 0, []
    for item in indexed(root) or discover(root):
        count, issues = option_problems(root, item, timeout)
        compared += count
        differing += [(item, issue) for issue in issues]
    print(f"{root}: watch against converge under other options: {compared} pairs compared")
    print(f"  differing: {len(differing)}")
    for item, issue in differing:
        print(f"  DIFFERS {item}: {issue}")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT / "shared" / "wild")
    parser.add_argument(
        "--expectations",
        type=Path,
        default=None,
        help="default: tests/diag/wild_expectations.toml for shared/wild, "
        "tests/diag/wild_heldout_expectations.toml for the held-out set",
    )
    parser.add_argument(
        "--fetched",
        type=Path,
        default=None,
        help="also run the locally fetched binary logs below this folder",
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per command")
    parser.add_argument(
        "--draft",
        type=Path,
        default=None,
        help="write TOML entries for the logs without an expectation",
    )
    parser.add_argument(
        "--options",
        action="store_true",
        help="also compare watch with converge under other options on every log (OPTION_SETS)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    expectations = args.expectations or (
        EXPECTATIONS.with_name("wild_heldout_expectations.toml")
        if "heldout" in args.root.name
        else EXPECTATIONS
    )
    ok = bench(args.root, expectations, args.timeout, args.draft, args.verbose)
    if args.options:
        ok &= bench_options(args.root, args.timeout)
    if args.fetched is not None:
        ok &= bench(
            args.fetched,
            EXPECTATIONS.with_name("wild_fetched_expectations.toml"),
            args.timeout,
            None,
            args.verbose,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
