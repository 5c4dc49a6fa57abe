"""The outbox command (`outbox`, or `python -m outbox`): Flask's commands and outbox.cli's."""

from outbox import cli
from outbox.app import create_app

main = cli.group(create_app)

if __name__ == "__main__":
    main()
