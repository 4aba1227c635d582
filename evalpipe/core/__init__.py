"""The base floor: types, errors, keys, canonical JSON and fingerprints, table schemas, the config model, redaction (docs/architecture.md). Imports nothing else of evalpipe."""
