"""Research scripts: not installed; they call the semdup library (run as ``python -m experiments.NAME``)."""
