"""Applications from recipes, their own test suites, and the conformance suites (LTP)."""
