"""For `plugins: [evalpipe_plugin_example.register]` in a config (no installation, the folder on PYTHONPATH)."""
from evalpipe.benchmarks import register_adapter
from evalpipe.metrics import register_metric

from evalpipe_plugin_example.adapter import InlineQAAdapter
from evalpipe_plugin_example.metric import ContainsAnswer

register_adapter("inline_qa", InlineQAAdapter, replace=True)
register_metric("contains_answer", ContainsAnswer, replace=True)
