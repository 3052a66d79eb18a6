"""Experiments: declarative specs of the studies, run over seeds in parallel workers."""
