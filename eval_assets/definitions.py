"""The code location: the Definitions of the project of the environment (EVALS_CONFIG, DAGSTER_HOME,
EVALS_WAREHOUSE; see eval_assets/factory.py for building them over any project)."""
from eval_assets.factory import build_definitions
from evalpipe.core.redact import install_log_redaction
from evalpipe.project import Project
from evalpipe.project.redaction import install_redaction

defs = build_definitions(Project.from_file())

install_redaction()  # the config file's secrets, followed as it changes
install_log_redaction()  # every process that loads the code location (runs, daemon, UI) masks secrets in logs
