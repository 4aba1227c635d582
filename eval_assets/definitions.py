"""The code location: everything Dagster loads, assembled in one place."""
import warnings

from dagster import Definitions, PreviewWarning

# partitioned asset checks are a Dagster preview feature we rely on on purpose: no notice in every process's log
warnings.filterwarnings("ignore", category=PreviewWarning)

from eval_assets.assets import EVAL_ASSETS
from eval_assets.checks import EVAL_CHECKS
from eval_assets.jobs import dataset_job, evaluate_job, leaderboard_job
from eval_assets.schedules import leaderboard_automation_sensor, retry_failed_partitions_schedule
from eval_assets.sensors import checkpoint_sensor, sync_models_sensor
from evalpipe.core.redact import install_log_redaction
from resources import default_resources

defs = Definitions(
    assets=EVAL_ASSETS,
    asset_checks=EVAL_CHECKS,
    jobs=[evaluate_job, dataset_job, leaderboard_job],
    sensors=[sync_models_sensor, checkpoint_sensor, leaderboard_automation_sensor],
    schedules=[retry_failed_partitions_schedule],
    resources=default_resources(),
)

install_log_redaction()  # every process that loads the code location (runs, daemon, UI) masks secrets in logs
