"""Analyses that look inside the networks; each returns data, and ``rnnlab.analysis.plots`` renders it."""
