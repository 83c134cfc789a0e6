"""A held-out set of hostile inputs for every command: none of these shapes was used while fixing
the reliability issues, so the share that holds says how well the fixes generalise.

Each case is written to a scratch folder and given to ``converge`` (text and JSON), ``compare``
and ``watch --once``. A run holds when it exits 0 or 2 (no ``--fail-on`` is given, so 1 is wrong too), prints no traceback, says an exit-2
error in one line on stderr, writes no raw terminal control bytes, and stays under the time and
memory bounds. ``dflash-train sync`` gets its own held-out cases (bad values, paths that are the wrong kind of
thing, damaged checkpoints and targets, an unwritable log); each must exit 2 with one line, or 0
where the input is valid. Run: ``python benchmarks/attacks_heldout.py [--only NAME] [--keep DIR]
[--no-train]``.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import json
import lzma
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TIME_LIMIT_S = 60.0
TRAIN_TIME_LIMIT_S = 300.0
RSS_LIMIT_MB = 1500.0
CONTROL = (b"\x1b", b"\x07", b"\x9b")


def _jsonl(records: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def _plain(n: int = 60, start: int = 1) -> list[dict]:
    return [
        {"step": s, "loss": 5.0 / (1 + 0.05 * s), "acc": 0.01 * min(s, 90) / 1.5, "lr": 3e-4}
        for s in range(start, start + n)
    ]


def _file(name: str, data: bytes) -> Callable[[Path], Path]:
    def make(root: Path) -> Path:
        path = root / name
        path.write_bytes(data)
        return path

    return make


def _bom_crlf_mid_header(root: Path) -> Path:
    body = _jsonl(_plain(30)) + _jsonl([{"event": "run_start", "schema": 1, "script": "sync"}])
    body += _jsonl(_plain(30, 31))
    return _file("bom_crlf.jsonl", b"\xef\xbb\xbf" + body.replace(b"\n", b"\r\n"))(root)


def _typed_oddly(root: Path) -> Path:
    rows = []
    for i, r in enumerate(_plain(80)):
        r = dict(r)
        kind = i % 8
        if kind == 0:
            r["step"] = str(r["step"])
        elif kind == 1:
            r["loss"] = [r["loss"]]
        elif kind == 2:
            r["acc"] = {"value": r["acc"]}
        elif kind == 3:
            r["lr"] = "3e-4"
        elif kind == 4:
            r["step"] = 1e308
        elif kind == 5:
            r["step"] = -r["step"]
        elif kind == 6:
            r["acc_pos"] = ["a", "b"]
        rows.append(r)
    return _file("typed_oddly.jsonl", _jsonl(rows))(root)


def _duplicate_keys(root: Path) -> Path:
    lines = [
        b'{"step": %d, "step": %d, "loss": 2.0, "loss": "x", "acc": 0.3}\n' % (s, s + 1000)
        for s in range(1, 60)
    ]
    return _file("dup_keys.jsonl", b"".join(lines))(root)


def _one_huge_line(root: Path) -> Path:
    return _file("huge_line.jsonl", b'{"step": 1, "note": "' + b"a" * 60_000_000 + b'"')(root)


def _same_step_million(root: Path) -> Path:
    line = b'{"step": 0, "loss": 1.0, "acc": 0.5}\n'
    return _file("same_step.jsonl", line * 1_000_000)(root)


def _million_empty_objects(root: Path) -> Path:
    return _file("empty_objects.jsonl", b"{}\n" * 1_000_000)(root)


def _time_backwards(root: Path) -> Path:
    rows = [dict(r, time=1e9 - 10 * r["step"]) for r in _plain(120)]
    rows[50]["time"] = float("nan")
    return _file("time_backwards.jsonl", _jsonl(rows).replace(b"NaN", b"NaN"))(root)


def _terminal_injection_keys(root: Path) -> Path:
    rows = [{"step": s, "\x1b[31mloss\x07": 1.0, "acc\x9b": 0.3} for s in range(1, 40)]
    rows[0]["event"] = "run_start"
    rows[0]["script"] = "\x1b]0;pwned\x07"
    return _file("inject.jsonl", _jsonl(rows))(root)


def _multimember_gzip_trailing(root: Path) -> Path:
    data = gzip.compress(_jsonl(_plain(40))) + gzip.compress(_jsonl(_plain(40, 41)))
    return _file("multi.jsonl.gz", data + b"trailing garbage")(root)


def _bz2_log(root: Path) -> Path:
    return _file("train.jsonl.bz2", bz2.compress(_jsonl(_plain(50))))(root)


def _xz_log(root: Path) -> Path:
    return _file("train.jsonl.xz", lzma.compress(_jsonl(_plain(50))))(root)


def _trainer_state_wrong_types(root: Path) -> Path:
    folder = root / "hf_wrong"
    folder.mkdir()
    state = {
        "global_step": "ten",
        "max_steps": -5,
        "log_history": [{"step": "a", "loss": "b"}, 7, None, [1, 2], {"loss": 1e400}],
    }
    (folder / "trainer_state.json").write_text(json.dumps(state).replace("Infinity", "1e400"))
    return folder


def _trainer_state_deep(root: Path) -> Path:
    depth = 200_000
    data = b'{"log_history": [' + b"[" * depth + b"]" * depth + b"]}"
    folder = root / "hf_deep"
    folder.mkdir()
    (folder / "trainer_state.json").write_bytes(data)
    return folder


def _csv_ragged(root: Path) -> Path:
    lines = ["step,loss,acc", "1,2.0", "2,1.9,0.1,extra,extra", "three,1.8,0.2", "4,,", "5,1.7,0.3"]
    lines += [f"{s},{2.0 - s / 100},{s / 200}" for s in range(6, 60)]
    return _file("metrics.csv", ("\n".join(lines) + "\n").encode())(root)


def _csv_header_only(root: Path) -> Path:
    return _file("header_only.csv", b"step,loss,acc\n")(root)


def _tfevents_random(root: Path) -> Path:
    folder = root / "tb_random"
    folder.mkdir()
    rng = random.Random(7)
    (folder / "events.out.tfevents.1700000000.host").write_bytes(rng.randbytes(200_000))
    return folder


def _tfevents_zero_and_short(root: Path) -> Path:
    folder = root / "tb_short"
    folder.mkdir()
    (folder / "events.out.tfevents.1.a").write_bytes(b"")
    (folder / "events.out.tfevents.2.b").write_bytes(struct.pack("<Q", 12) + b"\x00\x00")
    return folder


def _mlflow_odd_lines(root: Path) -> Path:
    run = root / "mlruns" / "0" / "abc123"
    (run / "metrics").mkdir(parents=True)
    (run / "meta.yaml").write_text("run_id: abc123\nstatus: 3\n")
    lines = ["nan nan nan", "1700000000000 1.5 -3", "x y z", "1700000000000 1.4", ""]
    lines += [f"{1700000000000 + s} {2.0 - s / 100} {s}" for s in range(1, 60)]
    lines.append("99999999999999999999999 1.0 99999999999999999999999")
    (run / "metrics" / "loss").write_text("\n".join(lines))
    return root / "mlruns"


def _wandb_random(root: Path) -> Path:
    run = root / "wandb" / "offline-run-20250101_000000-abc"
    run.mkdir(parents=True)
    (run / "run-abc.wandb").write_bytes(random.Random(3).randbytes(100_000))
    return root / "wandb"


def _many_empty_files(root: Path) -> Path:
    folder = root / "many_empty"
    folder.mkdir()
    for i in range(5000):
        (folder / f"part-{i:05d}.jsonl").write_bytes(b"")
    return folder


def _directory_without_logs(root: Path) -> Path:
    folder = root / "nothing"
    (folder / "sub" / "deeper").mkdir(parents=True)
    (folder / "sub" / "README.txt").write_text("no logs here\n")
    return folder


def _list_field_map(root: Path) -> Path:
    rows = [{"step": s, "metrics": {"loss": [1.0, 2.0]}, "acc": 0.2} for s in range(1, 50)]
    return _file("nested_lists.jsonl", _jsonl(rows))(root)


def _nul_every_other_line(root: Path) -> Path:
    body = b"".join(
        (line if i % 2 else b"\x00" * 64 + b"\n")
        for i, line in enumerate(_jsonl(_plain(100)).splitlines(True))
    )
    return _file("nuls.jsonl", body)(root)


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[Path], Path]
    extra: tuple[str, ...] = ()


CASES = [
    Case("bom_crlf_mid_header", _bom_crlf_mid_header),
    Case("typed_oddly", _typed_oddly),
    Case("duplicate_keys", _duplicate_keys),
    Case("one_huge_line", _one_huge_line),
    Case("same_step_million", _same_step_million),
    Case("million_empty_objects", _million_empty_objects),
    Case("time_backwards", _time_backwards),
    Case("terminal_injection_keys", _terminal_injection_keys),
    Case("multimember_gzip_trailing", _multimember_gzip_trailing),
    Case("bz2_log", _bz2_log),
    Case("xz_log", _xz_log),
    Case("trainer_state_wrong_types", _trainer_state_wrong_types),
    Case("trainer_state_deep", _trainer_state_deep),
    Case("csv_ragged", _csv_ragged),
    Case("csv_header_only", _csv_header_only),
    Case("tfevents_random", _tfevents_random),
    Case("tfevents_zero_and_short", _tfevents_zero_and_short),
    Case("mlflow_odd_lines", _mlflow_odd_lines),
    Case("wandb_random", _wandb_random),
    Case("many_empty_files", _many_empty_files),
    Case("directory_without_logs", _directory_without_logs),
    Case("list_field_map", _list_field_map, ("--field", "loss=metrics.loss")),
    Case("nul_every_other_line", _nul_every_other_line),
    Case("window_huge", _file("w.jsonl", _jsonl(_plain(50))), ("--window", "1" + "0" * 30)),
    Case("window_zero", _file("w0.jsonl", _jsonl(_plain(50))), ("--window", "0")),
    Case("alpha_nan", _file("a.jsonl", _jsonl(_plain(50))), ("--alpha", "nan")),
    Case("target_tau_inf", _file("t.jsonl", _jsonl(_plain(50))), ("--target-tau", "inf")),
    Case("end_step_negative", _file("e.jsonl", _jsonl(_plain(50))), ("--end-step", "-10")),
]


def _train_cases(root: Path) -> list[tuple[str, list[str], tuple[int, ...]]]:
    """(name, dflash-train sync arguments, exit codes that hold) for the training held-out set."""
    bad_toml = root / "bad.toml"
    bad_toml.write_text("max_steps = [1,\n")
    unknown_toml = root / "unknown.toml"
    unknown_toml.write_text("max_stepz = 3\n")
    a_file = root / "a_file"
    a_file.write_text("not a directory\n")
    garbage_ckpt = root / "garbage_ckpt"
    garbage_ckpt.mkdir(exist_ok=True)
    (garbage_ckpt / "train.safetensors").write_bytes(random.Random(5).randbytes(4096))
    (garbage_ckpt / "meta.json").write_text("{not json")
    no_weights = root / "no_weights"
    no_weights.mkdir(exist_ok=True)
    (no_weights / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    bad_config = root / "bad_config"
    bad_config.mkdir(exist_ok=True)
    (bad_config / "config.json").write_text("{")
    base = ["--max-steps", "2", "--no-progress"]

    def out(name: str) -> list[str]:
        return ["--log", str(root / f"{name}.jsonl"), "--ckpt-dir", str(root / f"{name}_ckpt")]

    two = (2,)
    return [
        ("valid_two_steps", [*base, *out("valid")], (0,)),
        ("lr_negative", [*base, *out("lr"), "--lr", "-1"], two),
        ("lr_nan", [*base, *out("lrnan"), "--lr", "nan"], two),
        ("epochs_negative", ["--epochs", "-1", "--no-progress", *out("ep")], two),
        ("max_steps_negative", ["--max-steps", "-3", "--no-progress", *out("ms")], two),
        ("block_size_one", [*base, *out("b1"), "--block-size", "1"], two),
        ("data_is_a_file", [*base, *out("data"), "--data", str(a_file)], two),
        ("config_syntax_error", [*base, *out("toml"), "--config", str(bad_toml)], two),
        ("config_unknown_key", [*base, *out("toml2"), "--config", str(unknown_toml)], two),
        (
            "ckpt_dir_is_a_file",
            [*base, "--log", str(root / "c.jsonl"), "--ckpt-dir", str(a_file)],
            two,
        ),
        ("resume_missing", [*base, *out("rm"), "--resume", str(root / "nope")], two),
        ("resume_garbage", [*base, *out("rg"), "--resume", str(garbage_ckpt)], two),
        (
            "log_device_full",
            [*base, "--log", "/dev/full", "--ckpt-dir", str(root / "full_ckpt")],
            two,
        ),
        ("device_cuda_absent", [*base, *out("cuda"), "--device", "cuda"], two),
        ("device_unknown", [*base, *out("dev"), "--device", "tpu:7"], two),
        ("target_without_weights", [*base, *out("tw"), "--target", str(no_weights)], two),
        ("target_config_broken", [*base, *out("tc"), "--target", str(bad_config)], two),
        ("seed_huge", [*base, *out("seed"), "--seed", "1" + "0" * 40], two),
    ]


def run_train(name: str, args: list[str], ok: tuple[int, ...], env: dict[str, str]) -> Outcome:
    train = Path(sys.executable).with_name("dflash-train")
    return run_judged(name, "train", [str(train), "sync", *args], ok, TRAIN_TIME_LIMIT_S, env)


COMMANDS = {
    "converge": ("converge", "{path}", "-f", "text"),
    "converge-json": ("converge", "{path}", "-f", "json"),
    "compare": ("compare", "{path}", "{path}"),
    "watch": ("watch", "--once", "{path}"),
}
# options that only converge-like commands take: watch gets the case's extras only where it has them
WATCH_OPTIONS = {"--window", "--alpha", "--target-tau", "--field"}


@dataclass
class Outcome:
    case: str
    command: str
    rc: int
    seconds: float
    rss_mb: float
    problem: str | None


def run_one(case: Case, command: str, path: Path, env: dict[str, str]) -> Outcome:
    args = [a.replace("{path}", str(path)) for a in COMMANDS[command]]
    extra = list(case.extra)
    if command == "watch" and extra and extra[0] not in WATCH_OPTIONS:
        extra = []
    argv = [sys.executable, "-m", "dflash_diag", *args, *extra]
    return run_judged(case.name, command, argv, (0, 2), TIME_LIMIT_S, env)


def run_judged(
    case: str, command: str, argv: list[str], ok: tuple[int, ...], limit: float, env: dict[str, str]
) -> Outcome:
    """Run ``argv`` under GNU time and judge it: exit code in ``ok``, no traceback, an exit-2
    error in one line, no raw terminal control byte, peak RSS within the bound."""
    start = time.monotonic()
    try:
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%M", *argv],
            check=False,
            capture_output=True,
            timeout=limit,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return Outcome(case, command, -1, limit, 0.0, "timeout")
    seconds = time.monotonic() - start
    lines = proc.stderr.decode("utf-8", "replace").rstrip("\n").split("\n")
    rss = lines.pop() if lines else ""  # GNU time's own last line: the peak RSS in KiB
    rss_mb = int(rss) / 1024 if rss.isdigit() else 0.0
    # GNU time also adds a line of its own on a non-zero exit
    lines = [e for e in lines if e.strip() and not e.startswith("Command exited with non-zero")]
    stderr = "\n".join(lines)
    problem = None
    if "Traceback" in stderr:
        problem = "traceback: " + lines[-1][:120]
    elif proc.returncode not in ok:
        problem = f"exit {proc.returncode}, expected {ok}: " + (lines[-1][:120] if lines else "")
    elif proc.returncode == 2 and len(lines) != 1:
        problem = f"exit 2 with {len(lines)} stderr lines: " + " | ".join(x[:60] for x in lines[:3])
    elif any(c in proc.stdout or c in stderr.encode() for c in CONTROL):
        problem = "raw terminal control bytes in the output"
    elif rss_mb > RSS_LIMIT_MB:
        problem = f"peak RSS {rss_mb:.0f} MB"
    return Outcome(case, command, proc.returncode, seconds, rss_mb, problem)


def report(o: Outcome) -> None:
    mark = "ok  " if o.problem is None else "FAIL"
    print(
        f"{mark} {o.case:28} {o.command:14} rc={o.rc:<3} {o.seconds:6.1f} s"
        f" {o.rss_mb:7.0f} MB  {o.problem or ''}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the cases whose name contains this")
    parser.add_argument("--keep", type=Path, help="write the cases here and keep them")
    parser.add_argument("--no-train", action="store_true", help="skip the dflash-train cases")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="attacks-"))
    root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, COLUMNS="100", XDG_CACHE_HOME=str(root / ".cache"))
    outcomes: list[Outcome] = []
    try:
        for case in CASES:
            if args.only and args.only not in case.name:
                continue
            where = root / case.name
            where.mkdir(exist_ok=True)
            path = case.make(where)
            for command in COMMANDS:
                outcomes.append(run_one(case, command, path, env))
                report(outcomes[-1])
        if not args.no_train:
            train_root = root / "train"
            train_root.mkdir(exist_ok=True)
            for name, train_args, ok in _train_cases(train_root):
                if args.only and args.only not in name:
                    continue
                outcomes.append(run_train(name, train_args, ok, env))
                report(outcomes[-1])
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    held = sum(o.problem is None for o in outcomes)
    cases = {o.case for o in outcomes}
    whole = sum(all(o.problem is None for o in outcomes if o.case == c) for c in cases)
    print(f"held: {held}/{len(outcomes)} runs, {whole}/{len(cases)} cases on every command")
    return 0 if held == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
