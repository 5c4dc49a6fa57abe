"""The shared fixtures, loaded for every layer from tests/support."""

pytest_plugins = [
    "tests.support.databases",
    "tests.support.app",
    "tests.support.postfix",
    "tests.support.dovecot",
    "tests.support.client_served",
    "tests.support.tlscerts",
    "tests.support.smtpd_process",
    "tests.support.bouncemail",
    "tests.support.browser",
    "tests.support.soak",
    "tests.support.ordering",
    "tests.support.dns",
]
