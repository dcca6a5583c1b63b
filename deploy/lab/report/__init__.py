"""pl-report: comparison table and SVG charts for a pipelearn lab directory.

Modules: runs (reading DIR/runs/*), metrics (per-run numbers and the
per (mode, profile) aggregate), tables (comparison.csv / comparison.md),
svg (a tiny SVG writer), charts (bar charts and the pipeline Gantt chart),
cli (the command). Standard library only.
"""
