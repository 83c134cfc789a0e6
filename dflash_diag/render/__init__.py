"""One renderer per output kind, for every command that offers it:

* :mod:`.text`: plain text (converge); :mod:`.rich`: rich tables and panels (converge, compare);
* :mod:`.markdown`: markdown, with the one cell escaper; :mod:`.json`: the JSON contracts, with
  the one cleaner of non-finite numbers; :mod:`.csv`: converge's windows;
* shared content: :mod:`.converge_rows`, :mod:`.compare_rows`; shared helpers:
  :mod:`.number_format`, :mod:`.sparkline` (log text is shown literally by :mod:`dflash_diag.text`).

watch's live view is :mod:`dflash_diag.watch.render`. Kept free of imports so the command modules
can use the helpers without loading polars.
"""
