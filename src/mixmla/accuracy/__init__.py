"""What each KV-cache format costs in accuracy: the study behind ``mixmla accuracy`` and
docs/ACCURACY.md (issue 15). ``layouts``: the compared cache layouts; ``study``: the method and
the measurements; ``report``: tables, JSON and the chart; ``command``: the CLI."""
