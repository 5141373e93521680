"""The service's routers, one per feature (README.md one folder up); nothing is imported here."""
