"""What the tests share: fixtures (loaded as plugins by tests/conftest.py), servers, helpers."""
