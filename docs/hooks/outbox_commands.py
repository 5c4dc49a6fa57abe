"""Every `outbox` command in one click group, as `outbox --help` lists them, for mkdocs-click.

The `outbox` group (a FlaskGroup) finds most of its commands on the app, so the app is
made here, on the defaults and in a throwaway instance folder, and its commands read.
"""

import os
import tempfile
from unittest import mock

import click
from flask.cli import ScriptInfo

from outbox.__main__ import main


def _everything() -> click.Group:
    """The group with the commands of main, of Flask's plugins and of the app."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    with tempfile.TemporaryDirectory() as folder:
        clean["OUTBOX_INSTANCE_PATH"] = folder
        with mock.patch.dict(os.environ, clean, clear=True):
            context = click.Context(main, obj=ScriptInfo(create_app=main.create_app))
            with context:
                names = main.list_commands(context)
                found = {name: main.get_command(context, name) for name in names}
    return click.Group("outbox", help=main.help, commands=found)


outbox = _everything()
