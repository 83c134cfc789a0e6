"""Every default of the diagnostics, defined once: the analysis, the library configs and the three
commands' options all read them from here (pure constants: the CLI imports this without polars).
"""

from __future__ import annotations

#: Steps per window (converge, watch, compare).
WINDOW = 50
#: An accuracy change (absolute) within which a trend arrow is flat.
ACC_THRESHOLD = 0.005
#: A loss change (fraction of the previous window's loss) within which a trend arrow is flat.
LOSS_THRESHOLD = 0.01
#: The accuracy target of the original analysis (the default target: in accuracy units).
TARGET_ACC = 0.27
#: The reference drafter's acceptance length of the original analysis (the default baseline).
BASELINE_TAU = 3.1
#: Where the default baseline comes from, for the report.
BASELINE_SOURCE = "default: the original analysis' reference drafter"
#: Block size B when neither ``--block-size`` nor the ``run_start`` header gives one.
BLOCK_SIZE = 16
#: Significance level of the verdict's Mann-Kendall test.
ALPHA = 0.05
#: Fewest windows the verdict judges on (with 4 or fewer no trend can reach p < 0.05).
MIN_POINTS = 5
#: Steps on each side of a compare boundary.
BOUNDARY_K = 50
#: Robust standard deviations above its neighbours that make a window's loss a spike.
SPIKE_FACTOR = 6.0
#: Fewest walked records in a window for the walked tau to be the primary estimate: each record
#: walks only a few sequences, and fewer records say little about their spread.
WALK_MIN_RECORDS = 3
#: Largest relative standard error (SE / tau_walk) at which the walked tau leads the estimates;
#: a noisier walk is listed with its error and the next estimator (harmonic) leads. 10%: the
#: harmonic estimator's typical error on real logs, so a noisier walk is no better evidence.
WALK_MAX_REL_SE = 0.10
