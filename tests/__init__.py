"""streamslo test suite."""
