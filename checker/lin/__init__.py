"""Linearizability: models, the search (entries, depth-first, sweep, the portfolio), the
checker of a run's history, and whole files of other formats."""
