"""Other harnesses' formats, in and out (docs/interop.md): Inspect AI eval logs (`inspect_log`), the portable
results file of a run (`results_file`). Each module reads the warehouse through evalpipe.store and imports its
optional library (inspect_ai, ...) only inside the functions that need it: `import evalpipe` never pays for them.
"""
