"""Unit tests: pure logic, no app, no database, no processes."""
