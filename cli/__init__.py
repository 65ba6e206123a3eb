"""`kpi-forecast`: the command line, assembled from the command groups that live next to what
they drive (`training.commands`, `xapp.commands`, `xapp.e2.commands`)."""
