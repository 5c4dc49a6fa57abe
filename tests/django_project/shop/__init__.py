"""A shop that sends its mail through outbox (tests/test_client_django.py)."""
