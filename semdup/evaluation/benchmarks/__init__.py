"""Speed benchmarks: scripts that print numbers with the command, hardware and versions (never tests)."""
