"""The project floor: the project object, reading and checking the config, loading plugins
(docs/architecture.md, docs/configuration.md#the-project-object)."""
from evalpipe.project import plugins  # noqa: F401  (installs the plugin loader on registry misses)
from evalpipe.project.loader import config_from_dict, load_config, parse_config
from evalpipe.project.project import Project

__all__ = ["Project", "config_from_dict", "load_config", "parse_config"]
