"""Pure analysis shared by every command: restarts, phase selection, windows, trends, schedule,
acceptance, verdict and alerts. Plain data in (polars frames, dataclasses), plain data out;
nothing here reads files or renders.
"""
