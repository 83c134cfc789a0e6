"""Readers of the log formats other trainers write, each feeding the canonical parsed log.

One module per format (see docs/formats.md for the facts each relies on); :mod:`.detect` tells
a path's format by its content and :mod:`.canonical` turns any reader's scalars into the frame
and events the JSONL reader builds.
"""
