"""Tool-use scoring: the BFCL AST checker (`bfcl_checker`) and the tool-integration harness (`integration`,
`report`, `gates`). Plain Python, no Dagster; the metrics that use them live in `evalpipe/metrics/`."""
