"""The sample viewer: `evalpipe view --web` (docs/viewer.md). `queries` reads the warehouse, `app` serves pages."""
