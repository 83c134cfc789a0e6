"""`dflash-diag watch` in a real terminal: a pseudo-terminal (always), and tmux where installed.

The command runs as a child process on a pty while the test appends lines to the log; the bytes
the child draws must show the update, and ``q`` or Ctrl-C must end it with exit code 0.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
import uuid

import pytest

from .test_watch import HEADER, rising

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pty")

CLI = [sys.executable, "-c", "from dflash_diag.cli import main; main()"]
DEADLINE = 30.0  # generous: the machine is shared; a passing run takes about a second


class PtyWatch:
    """``dflash-diag watch`` running on the slave side of a pty; we read the master side."""

    def __init__(self, log, *args: str, rows: int = 50, cols: int = 110) -> None:
        self.pid, self.fd = os.forkpty()
        if self.pid == 0:  # the child: stdin/stdout/stderr are the terminal
            env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(cols), LINES=str(rows))
            env.pop("NO_COLOR", None)
            try:
                os.execvpe(CLI[0], [*CLI, "watch", str(log), "--interval", "0.2", *args], env)
            finally:
                os._exit(127)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.screen = b""

    def read_until(self, needle: bytes, timeout: float = DEADLINE) -> bytes:
        end = time.monotonic() + timeout
        while needle not in self.screen:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"{needle!r} never shown; screen tail: {self.screen[-2000:]!r}"
                )
            ready, _, _ = select.select([self.fd], [], [], min(left, 0.5))
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # EIO: the child closed the terminal
                    chunk = b""
                if not chunk:
                    raise AssertionError(
                        f"exited before showing {needle!r}: {self.screen[-2000:]!r}"
                    )
                self.screen += chunk
        return self.screen

    def send(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def exit_code(self, timeout: float = DEADLINE) -> int:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            # keep draining so the child never blocks on a full pty buffer
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                try:
                    self.screen += os.read(self.fd, 65536)
                except OSError:
                    pass
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        self.kill()
        raise AssertionError("watch did not exit")

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(HEADER) + "\n" + rising(15000, 15300))
    return path


def _append(path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def test_pty_shows_appended_lines_and_q_quits(log):
    watch = PtyWatch(log)
    try:
        watch.read_until(b"step 15299")
        assert b"15250-15299" in watch.screen
        _append(log, rising(15300, 15350))
        watch.read_until(b"step 15349")
        watch.read_until(b"15300-15349")
        # a torn line does not show until its newline arrives
        line = rising(15350, 15351)
        _append(log, line[:25])
        time.sleep(0.6)
        assert b"step 15350" not in watch.screen
        _append(log, line[25:])
        watch.read_until(b"step 15350")
        watch.send(b"q")
        assert watch.exit_code() == 0
    finally:
        watch.kill()


def test_pty_ctrl_c_exits_cleanly(log):
    watch = PtyWatch(log)
    try:
        watch.read_until(b"verdict:")
        watch.send(b"\x03")  # the terminal turns it into SIGINT for the foreground process
        assert watch.exit_code() == 0
        assert b"Traceback" not in watch.screen
    finally:
        watch.kill()


def test_pty_once_draws_one_frame_and_exits(log):
    watch = PtyWatch(log, "--once")
    try:
        watch.read_until(b"verdict:")
        assert watch.exit_code() == 0
    finally:
        watch.kill()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_tmux_screen_shows_the_update(log):
    socket = f"dflash-test-{uuid.uuid4().hex[:8]}"  # a private server: never touches the user's
    tmux = ["tmux", "-L", socket, "-f", "/dev/null"]
    command = " ".join([*(f"'{c}'" for c in CLI), "watch", f"'{log}'", "--interval", "0.2"])
    subprocess.run([*tmux, "new-session", "-d", "-x", "110", "-y", "50", command], check=True)
    # keep the pane after the command ends, to read its exit status
    subprocess.run([*tmux, "set-option", "-g", "remain-on-exit", "on"], check=True)

    def screen() -> str:
        return subprocess.run(
            [*tmux, "capture-pane", "-p"], check=False, capture_output=True, text=True
        ).stdout

    def wait_for(text: str) -> str:
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            shown = screen()
            if text in shown:
                return shown
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not on screen:\n{screen()}")

    try:
        wait_for("step 15299")
        _append(log, rising(15300, 15350))
        shown = wait_for("step 15349")
        assert "15300-15349" in shown
        assert "step 15299" not in shown  # redrawn in place, not appended below
        subprocess.run([*tmux, "send-keys", "q"], check=True)
        end = time.monotonic() + DEADLINE
        state = ""
        while time.monotonic() < end:
            state = subprocess.run(
                [*tmux, "display-message", "-p", "#{pane_dead} #{pane_dead_status}"],
                check=False,
                capture_output=True,
                text=True,
            ).stdout.strip()
            if state.startswith("1"):
                break
            time.sleep(0.2)
        assert state == "1 0", f"q did not end watch with exit code 0 (pane: {state!r})"
    finally:
        subprocess.run([*tmux, "kill-server"], check=False, capture_output=True)
