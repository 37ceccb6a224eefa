"""Training with populations of runs: each member a run of its own under the population's
run directory, steered by a controller-level stage (PBT: docs/population.md)."""
