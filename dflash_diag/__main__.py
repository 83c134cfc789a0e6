"""``python -m dflash_diag``: the ``dflash-diag`` command, for environments without its script."""

from dflash_diag.cli import run

if __name__ == "__main__":
    run()
