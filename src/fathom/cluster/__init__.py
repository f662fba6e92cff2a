"""Clusters fathom measures: a disposable local one (local.py) or an existing one (attach)."""
