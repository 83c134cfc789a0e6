"""`dflash-diag compare`: regimes of one log and the jump at each boundary, or two runs aligned.

* :mod:`.regimes`: finding the regimes (`find_regimes`, `RunConfig`, `Regime`);
* :mod:`.boundary`: the loss ratio and acc delta at a boundary and their explanation;
* :mod:`.align`: two runs side by side on steps or tokens seen (`align_runs`);
* :mod:`.report`: `compare_regimes`, which assembles them into a `RegimeComparison`;
* :mod:`.runs`: loading the log(s) for the command (`compare_log`, `compare_two_runs`).

Rendering is :mod:`dflash_diag.render`'s.
"""
