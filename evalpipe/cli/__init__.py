"""Entry points: the `evalpipe` command, one module per command group (top floor; docs/architecture.md)."""
