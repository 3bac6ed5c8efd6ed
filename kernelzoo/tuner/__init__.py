"""The tuner: Optuna searches over each plugin's config space, trials run and timed in worker processes."""
