"""Configuration layers: defaults, instance/config.py, OUTBOX_* variables, test mapping."""

import subprocess
import sys

import pytest

from outbox import config, create_app


def test_environment_values_are_typed():
    found = config.from_environ(
        {
            "OUTBOX_MAIL_PORT": "2525",
            "OUTBOX_MAIL_USE_TLS": "yes",
            "OUTBOX_RETRY_BACKOFF": "1.5",
            "OUTBOX_MAIL_SERVER": "smtp.internal",
            "UNRELATED": "x",
        }  # fmt: skip
    )
    assert found == {
        "MAIL_PORT": 2525,
        "MAIL_USE_TLS": True,
        "RETRY_BACKOFF": 1.5,
        "MAIL_SERVER": "smtp.internal",
    }


@pytest.mark.parametrize(
    ("name", "raw"), [("OUTBOX_MAIL_PORT", "twenty"), ("OUTBOX_MAIL_USE_SSL", "maybe")]
)
def test_bad_environment_values_name_the_variable(name, raw):
    with pytest.raises(ValueError, match=name):
        config.from_environ({name: raw})


def test_layers_apply_in_order(tmp_path, monkeypatch):
    (tmp_path / "config.py").write_text("POLL_INTERVAL = 7\nBATCH_SIZE = 11\nMAX_ATTEMPTS = 4\n")
    monkeypatch.setenv("OUTBOX_INSTANCE_PATH", str(tmp_path))
    monkeypatch.setenv("OUTBOX_BATCH_SIZE", "12")
    app = create_app({"MAX_ATTEMPTS": 5})
    assert app.config["POLL_INTERVAL"] == 7  # instance/config.py over the default
    assert app.config["BATCH_SIZE"] == 12  # environment over instance/config.py
    assert app.config["MAX_ATTEMPTS"] == 5  # test mapping over everything
    assert app.config["RETRY_DELAY"] == config.DEFAULTS["RETRY_DELAY"]
    assert app.config["DATABASE_URL"] == f"sqlite:///{tmp_path / 'outbox.sqlite3'}"


def test_secret_key_is_made_once_and_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("OUTBOX_INSTANCE_PATH", str(tmp_path))
    first = create_app().config["SECRET_KEY"]
    assert len(first) == 64
    assert create_app().config["SECRET_KEY"] == first
    assert (tmp_path / "secret_key").stat().st_mode & 0o077 == 0


def test_processes_starting_together_share_one_whole_key(tmp_path):
    # Workers started at once on a new instance folder all make the key; the first
    # one written wins, and no process reads it before it is whole.
    script = (
        "import sys; from pathlib import Path; from outbox.app import _stored_secret as s; "
        "print(s(Path(sys.argv[1])))"
    )
    starts = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(8)
    ]
    keys = {start.communicate(timeout=60)[0].strip() for start in starts}
    assert all(start.returncode == 0 for start in starts)
    assert keys == {(tmp_path / "secret_key").read_text()}
    assert len(keys.pop()) == 64
    assert [path.name for path in tmp_path.iterdir()] == ["secret_key"]


def test_a_lock_timeout_shorter_than_a_slow_send_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("OUTBOX_INSTANCE_PATH", str(tmp_path))
    with pytest.raises(ValueError, match="LOCK_TIMEOUT"):
        create_app({"SMTP_TIMEOUT": 30, "LOCK_TIMEOUT": 60})


KINDS = {bool: "true or false", int: "integer", float: "number", str: "text"}


def test_every_setting_has_a_description_and_its_type():
    """The settings reference is made from these: none may be missing, stray or mistyped."""
    assert list(config.DESCRIPTIONS) == list(config.DEFAULTS)
    assert all(text.strip() for text in config.DESCRIPTIONS.values())
    for name, default in config.DEFAULTS.items():
        if default is not None and not isinstance(default, frozenset):  # sets: kinds of their own
            assert config.type_name(name) == KINDS[type(default)], name


def test_a_process_loads_the_migration_tools_only_to_migrate(tmp_path):
    # A worker or `outbox smtpd` starts without Alembic (and its Mako and Pygments); `outbox
    # db` and the readiness probe still find them when asked.
    script = (
        "import sys\n"
        "from outbox import create_app\n"
        "from outbox.ops import probes\n"
        f"app = create_app({{'DATABASE_URL': 'sqlite:///{tmp_path}/o.sqlite3'}})\n"
        "heavy = {'alembic', 'flask_migrate', 'mako', 'pygments'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
        "with app.app_context():\n"
        "    print(probes.schema_head())\n"
        "print(app.extensions['migrate'].directory.endswith('migrations'))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, cwd=tmp_path)  # fmt: skip
    loaded, head, bound = done.stdout.splitlines()
    assert loaded == "[]"
    assert head.isdigit()
    assert bound == "True"
    listed = subprocess.run([sys.executable, "-m", "outbox", "db", "--help"],
                            capture_output=True, text=True, check=True, cwd=tmp_path)  # fmt: skip
    assert "upgrade" in listed.stdout
