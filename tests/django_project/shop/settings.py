"""Settings of the shop: outbox's backend, pointed at by OUTBOX_URL and OUTBOX_TOKEN."""

import os

SECRET_KEY = "test"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
ROOT_URLCONF = "shop.urls"
INSTALLED_APPS: list[str] = []
DATABASES: dict[str, dict[str, str]] = {}
USE_TZ = True
DEFAULT_FROM_EMAIL = "Shop <shop@example.com>"

EMAIL_BACKEND = "outbox.client.django.EmailBackend"
OUTBOX_URL = os.environ["OUTBOX_URL"]
OUTBOX_TOKEN = os.environ["OUTBOX_TOKEN"]
OUTBOX_TIMEOUT = 10.0
