"""`kchaos nightly`: a plan of runs (dbs x configurations x workloads x nemeses x seeds, or
explicit cells), run one after another or `--parallel N` at once, checked in one Spark
job, judged against each cell's expectation; junit.xml, a summary page, and trends in the
store index. Modules: plan (the TOML plan), state (the night folder and night.json),
execute (child runs, budget, parallelism), verdicts (facts and expectations), junit,
night (the whole night). Shipped plans are in `suites/` (`--suite NAME`).
"""
