"""ops.pause: the pause read for a page stays readable whatever happens to its row after."""

import pytest
from sqlalchemy import delete

from outbox.models import Pause
from outbox.models.db import db
from outbox.ops import pause


@pytest.mark.all_databases
def test_a_pause_read_stays_whole_after_a_commit_and_a_resume_elsewhere(app):
    pause.pause("ann@example.com", "relay down")
    shown = pause.current()
    assert shown is not None
    with db.engine.connect() as elsewhere:  # another process's resume
        elsewhere.execute(delete(Pause))
        elsewhere.commit()
    db.session.commit()  # a page's later reads commit: the session's objects expire
    assert (shown.paused_by, shown.reason) == ("ann@example.com", "relay down")
    assert pause.current() is None
    assert pause.resume() is None
