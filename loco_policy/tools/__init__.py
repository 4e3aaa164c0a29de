"""Demo, deployment benchmark, bag writing, plots and command schedules."""
