"""Helpers shared by the test files: plain modules, imported as `tests.helpers.<module>`.

- kill9: start a run in a child process, SIGKILL it midway, read what its journal finished
- services: throwaway redis-server and PostgreSQL servers, free loopback ports
- secrets: every byte a run left on disk, as searchable text
- mock_servers: the loopback model server (benchmarks/mock_server.py) as a separate process
- cli: the `evalpipe` command in this process
- configs: YAML for the file benchmark over data/smoke
- procs: many forked processes started at one instant
The pytest fixtures over these (redis_url, postgres_url) are in tests/conftest.py."""
