"""The project floor: reading and checking the config file, loading plugins (docs/architecture.md)."""
