"""The one domain exception of dflash_diag.

Library functions raise :class:`DiagError` for problems with the user's input (a missing file, an
empty log, a selection that matches nothing). The CLI turns it into one line on stderr and exit
code 2; internal invariants use ``assert`` instead.
"""

from __future__ import annotations


class DiagError(ValueError):
    """Bad input to the diagnostics: the message is shown to the user as is, on one line."""
