"""`dflash-diag watch` in a real terminal: a pseudo-terminal (always), and tmux where installed.

The command runs as a child process on a pty while the test appends lines to the log; the bytes
the child draws must show the update, and ``q`` or Ctrl-C must end it with exit code 0.

Every wait is on a condition, never a fixed delay: the machine running the suite is shared and
loaded, so the CLI may need many seconds to start and a frame may arrive in several reads (the
first bytes of a frame are no proof that the rest has been drawn). `DEADLINE` bounds each wait.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
import uuid
from collections.abc import Callable

import pytest

from .test_watch import HEADER, rising

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pty")

CLI = [sys.executable, "-c", "from dflash_diag.cli import main; main()"]
# Generous: a passing run takes about a second, but on a loaded 2-core machine the CLI's start
# (python, polars, rich) alone has been seen to take over ten.
DEADLINE = 60.0
# The last line of every frame: once it is read, the whole frame before it is too.
FRAME_END = b"verdict:"


class PtyWatch:
    """``dflash-diag watch`` running on the slave side of a pty; we read the master side."""

    def __init__(self, log, *args: str, rows: int = 50, cols: int = 110) -> None:
        size = struct.pack("HHHH", rows, cols, 0, 0)
        self.pid, self.fd = os.forkpty()
        if self.pid == 0:  # the child: stdin/stdout/stderr are the terminal
            try:
                # the size is set before exec, so the child never sees a default-sized terminal
                fcntl.ioctl(0, termios.TIOCSWINSZ, size)
                env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(cols), LINES=str(rows))
                env.pop("NO_COLOR", None)
                os.execvpe(CLI[0], [*CLI, "watch", str(log), "--interval", "0.2", *args], env)
            finally:
                os._exit(127)
        self.screen = b""
        self.exited = False  # reaped: its pid may belong to another process now

    def _read(self, timeout: float) -> bool:
        """Append what the child wrote within ``timeout`` seconds; False once it closed the pty."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        self.screen += chunk
        return bool(chunk)

    def wait_for(
        self, done: Callable[[bytes], bool], what: str, timeout: float = DEADLINE
    ) -> bytes:
        """Read until ``done(screen)`` holds; AssertionError naming ``what`` after ``timeout``."""
        end = time.monotonic() + timeout
        while not done(self.screen):
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{what} never shown; screen tail: {self.screen[-2000:]!r}")
            if not self._read(min(left, 0.5)):
                raise AssertionError(f"exited before showing {what}: {self.screen[-2000:]!r}")
        return self.screen

    def read_until(self, needle: bytes, timeout: float = DEADLINE) -> bytes:
        return self.wait_for(lambda screen: needle in screen, repr(needle), timeout)

    def frames(self) -> int:
        """Frames fully drawn so far."""
        return self.screen.count(FRAME_END)

    def drain(self) -> None:
        """Read everything already written, without waiting for more."""
        while select.select([self.fd], [], [], 0)[0] and self._read(0):
            pass

    def send(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def exit_code(self, timeout: float = DEADLINE) -> int:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self._read(0.1)  # keep draining so the child never blocks on a full pty buffer
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.exited = True
                return os.waitstatus_to_exitcode(status)
        raise AssertionError(f"watch did not exit; screen tail: {self.screen[-2000:]!r}")

    def close(self) -> None:
        """Kill the child if it still runs (never a reaped pid) and close the pty."""
        if not self.exited:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.exited = True
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


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
        watch.read_until(FRAME_END)  # the rest of the first frame
        assert b"15250-15299" in watch.screen
        _append(log, rising(15300, 15350))
        watch.read_until(b"step 15349")
        watch.read_until(b"15300-15349")
        # a torn line does not show until its newline arrives: let the view redraw three times
        # after the torn half is written (at least two of those refreshes read the file after it)
        line = rising(15350, 15351)
        watch.drain()
        _append(log, line[:25])
        seen = watch.frames()
        watch.wait_for(lambda _: watch.frames() >= seen + 3, "three more frames")
        assert b"step 15350" not in watch.screen
        _append(log, line[25:])
        watch.read_until(b"step 15350")
        watch.send(b"q")
        assert watch.exit_code() == 0
    finally:
        watch.close()


def test_pty_ctrl_c_exits_cleanly(log):
    watch = PtyWatch(log)
    try:
        watch.read_until(FRAME_END)
        watch.send(b"\x03")  # the terminal turns it into SIGINT for the foreground process
        assert watch.exit_code() == 0
        assert b"Traceback" not in watch.screen
    finally:
        watch.close()


def test_pty_once_draws_one_frame_and_exits(log):
    watch = PtyWatch(log, "--once")
    try:
        watch.read_until(FRAME_END)
        assert watch.exit_code() == 0
    finally:
        watch.close()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_tmux_screen_shows_the_update(log, tmp_path):
    # a private server without a config: never touches the user's tmux
    tmux = ["tmux", "-L", f"dflash-test-{uuid.uuid4().hex[:8]}", "-f", "/dev/null"]
    exit_file = tmp_path / "exit_code"
    exit_file.write_text("")
    watch = shlex.join([*CLI, "watch", str(log), "--interval", "0.2"])
    command = ["sh", "-c", f"{watch}; echo $? > {shlex.quote(str(exit_file))}"]  # not $SHELL's
    subprocess.run([*tmux, "new-session", "-d", "-x", "110", "-y", "50", *command], check=True)

    def tmux_out(*args: str) -> str:
        return subprocess.run([*tmux, *args], check=False, capture_output=True, text=True).stdout

    def wait_for(done: Callable[[str], bool], what: str) -> str:
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            shown = tmux_out("capture-pane", "-p")
            if done(shown):
                return shown
            time.sleep(0.1)
        raise AssertionError(f"{what} not on screen:\n{tmux_out('capture-pane', '-p')}")

    try:
        wait_for(lambda s: "step 15299" in s, "step 15299")
        _append(log, rising(15300, 15350))
        # a capture may catch a redraw half done (new header, old table): wait for the frame's
        # table row, drawn after its header line
        shown = wait_for(
            lambda s: "step 15349" in s and "15300-15349" in s, "step 15349 and its window"
        )
        assert "15300-15349" in shown
        assert "step 15299" not in shown  # redrawn in place, not appended below
        subprocess.run([*tmux, "send-keys", "q"], check=True)
        # the shell records the exit code: tmux's own #{pane_dead_status} can stay empty after the
        # pane is marked dead (it learns the status only when it reaps the process)
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end and not exit_file.read_text().strip():
            time.sleep(0.1)
        code = exit_file.read_text().strip()
        assert code == "0", f"q did not end watch with exit code 0 (exit code: {code!r})"
    finally:
        subprocess.run([*tmux, "kill-server"], check=False, capture_output=True)
