"""The library's tests (each recipe's are in recipes/<task>/tests/); their shared helpers are tests.helpers."""
