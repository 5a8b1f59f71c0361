"""Reports: plots (matplotlib, Agg canvas) and a self-contained HTML report of the protocols' metrics."""
