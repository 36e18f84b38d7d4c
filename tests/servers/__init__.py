"""Real servers for the tests, started on free 127.0.0.1 ports and stopped at
the end of the session."""
