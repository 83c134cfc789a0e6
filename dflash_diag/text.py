"""Showing text taken from a log literally (shared by the readers' error messages and every
renderer, so it sits outside both layers).

A log is untrusted input: a run name like ``[bold red]`` must not style the report, and an ANSI
escape sequence must not reach the terminal. Control characters are made visible (``\\x1b``);
renderers build :class:`rich.text.Text` from the result, never markup, so markup shows literally.
"""

from __future__ import annotations

import re

# C0 controls except tab, DEL and C1 controls (which include the 8-bit CSI), plus the Unicode
# line/paragraph separators and bidi overrides that can reorder a terminal line.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def visible(text: object) -> str:
    """``text`` as a string with every control character shown as an escape (``\\x1b``)."""
    return _CONTROL.sub(
        lambda m: (
            f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"
        ),
        str(text),
    )
