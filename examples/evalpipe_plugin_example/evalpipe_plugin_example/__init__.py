"""An example evalpipe plugin (docs/reproducibility.md#plugins).

Installed (`pip install --no-deps examples/evalpipe_plugin_example`), it adds the adapter `inline_qa` and the
metric `contains_answer` through the entry-point groups `evalpipe.adapters` and `evalpipe.metrics`; nothing in
evalpipe is edited. Without installing it, list the module under `plugins:` in the config instead (with the
folder on PYTHONPATH): `evalpipe_plugin_example.register` registers both at import.
"""
