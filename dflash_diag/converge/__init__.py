"""`dflash-diag converge`: one report of a whole log (:mod:`.report`), rendered by
:mod:`dflash_diag.render`."""
