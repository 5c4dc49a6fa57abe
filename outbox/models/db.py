"""The SQLAlchemy object every table and query goes through, bound to the app in create_app."""

from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)
# The bind key of a second engine on a database server, whose connections commit each
# statement (see queue.enqueue).
AUTOCOMMIT = "autocommit"


def dispose_engines() -> None:
    """Close the pooled connections of the app's engines, the autocommit one too."""
    for engine in db.engines.values():
        engine.dispose()
