"""The API and the staff pages through the test client."""
