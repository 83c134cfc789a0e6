"""Reading training logs: file access (:mod:`.files`), JSONL parsing into polars frames
(:mod:`.jsonl`), the parsed record types (:mod:`.records`), the fields read (:mod:`.schema`, from
:mod:`dflash_diag.logschema`), incremental reading for watch (:mod:`.tail`) and per-rank logs
(:mod:`.ranks`).

Kept free of imports: ``dflash-diag --help`` loads :mod:`.files` without polars.
"""
