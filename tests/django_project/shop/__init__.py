"""A shop that sends its mail through outbox (tests/e2e/test_client_django.py)."""
