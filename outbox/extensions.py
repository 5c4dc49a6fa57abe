"""The Flask extension objects of the web side, bound to the app in create_app."""

from typing import Any

from flask import Flask
from flask_login import LoginManager
from flask_mail import Mail
from flask_wtf import CSRFProtect

mail = Mail()
login_manager = LoginManager()
csrf = CSRFProtect()


class Migrations:
    """Flask-Migrate, bound to the app when a migration first reads its settings.

    Importing Flask-Migrate imports Alembic, Mako and Pygments, a sixth of the start of
    every outbox process (a worker, `outbox smtpd`), and only `outbox db`, the demo and
    the tests migrate. Flask-Migrate reads app.extensions["migrate"]; this stands there
    until the first read binds the real one in its place.
    """

    def __init__(self, app: Flask, db: Any, directory: str) -> None:
        self._bind = (app, db, directory)
        app.extensions["migrate"] = self

    def __getattr__(self, name: str) -> Any:
        from flask_migrate import Migrate

        app, db, directory = self._bind
        Migrate(app, db, directory=directory)
        return getattr(app.extensions["migrate"], name)
