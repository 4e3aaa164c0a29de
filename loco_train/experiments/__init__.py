"""Evaluation, comparisons and ablations of trained policies and runs."""
