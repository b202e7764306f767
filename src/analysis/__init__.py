"""Parquet export, aggregation across runs, summary tables and figures of an experiment.

`export.export_run` (per run), `aggregate.aggregate`, `tables.make_summary` and
`figures.make_figures` (per experiment); `files` holds the atomic writers they share and
`style` the look of every figure.
"""
