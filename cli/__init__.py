"""`kpi-forecast`: the command line, assembled from the command groups that live next to what
they drive (`training.commands`, `training.evaluation_commands`,
`training.job_commands`, `xapp.commands`, `xapp.e2.commands`)."""
