"""The outbox command (`outbox`, or `python -m outbox`): Flask's commands, outbox's and the demo."""

from flask.cli import FlaskGroup

from outbox import demo
from outbox.app import create_app
from outbox.cli import checkup

main = FlaskGroup(create_app=create_app, help="outbox: a database-backed mail outbox.")
main.add_command(demo.command)
main.add_command(checkup.command)  # `outbox check`: reports settings create_app refuses

if __name__ == "__main__":
    main()
