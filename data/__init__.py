"""Reference data committed with the project (check cases: ``cases/*.json``)."""
