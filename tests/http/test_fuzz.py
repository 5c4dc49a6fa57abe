"""Fuzzing the API from its own OpenAPI description: no 5xx, answers as described, nothing lost."""

import os
from collections import Counter

import pytest
import schemathesis
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.generation.feedback import FeedbackSources

from outbox.auth import tokens
from outbox.core.status import Status
from outbox.models import Mailing, Message
from outbox.models.db import db
from tests.support.fuzz import CHECKS, MODES, stored_whole
from tests.support.pages import move_to

# In `make test` small and on MariaDB; `make soak` (OUTBOX_SOAK=1) runs it ten times
# larger and on SQLite and PostgreSQL too.
pytestmark = pytest.mark.soak
SOAK = os.environ.get("OUTBOX_SOAK") == "1"
# Examples per generation mode for the operation that stores messages; half as many
# for the others, which only read or move one.
EXAMPLES = 1000 if SOAK else 100
# A few keys, so that repeats and reuses for other messages happen.
KEYS = ["order-1", "order-2", "Order-1"]
# The operations that store messages, fuzzed with the most examples: those whose answer
# names the messages, and those whose answer names a mailing, whose recipients are rows.
MESSAGES = ("/api/messages", "/api/messages/batch")
MAILINGS = ("/api/mailings", "/api/mailings/{id}/recipients")
STORING = (*MESSAGES, *MAILINGS)
KEYED = (*MESSAGES, "/api/mailings")  # those that take an Idempotency-Key
# Queues a message again; were it to make a copy, its answer names the one queued.
RESEND = "/api/messages/{id}/resend"


# Generating the cases is most of the cost (derandomized, much the same cases for each
# database). What the answers say depends on no database; what is stored can only
# break on one that holds each column to its length, as SQLite does not. So
# `make test` fuzzes once, on MariaDB, the database outbox runs on in production.
DATABASES = [pytest.param("mariadb", marks=pytest.mark.mariadb)]
if SOAK:
    DATABASES = ["sqlite", *DATABASES, pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=DATABASES)
def db_kind(request: pytest.FixtureRequest) -> str:
    """MariaDB, and in the soak run SQLite and PostgreSQL too (see DATABASES)."""
    return request.param


def test_fuzzed_api_answers_as_described_and_stores_only_whole_messages(app, db_kind, make_message):
    auth = {"Authorization": f"Bearer {tokens.create('fuzz')}"}
    seeded = [move_to(make_message(subject=status.value), status) for status in Status]
    # Selected explicitly, the operation that serves the document is fuzzed too.
    schema = schemathesis.openapi.from_wsgi("/api/openapi.json", app, headers=auth)
    schema = schema.include(path_regex="^/api/")
    client = app.test_client()
    answers: Counter[int] = Counter()
    created: set[int] = set()
    mailings: dict[int, int] = {}  # id: how many recipients its last answer counted
    keyed: dict[tuple[str, str], int] = {}  # (path, key): the first message's or mailing's id
    replays = 0

    def record(case: schemathesis.Case, response: schemathesis.Response) -> None:
        """Every 201 names what it stored; a repeated key names the first one."""
        nonlocal replays
        answers[response.status_code] += 1
        path = case.operation.path
        if path == RESEND and response.status_code == 200:
            created.add(response.json()["id"])
        if path not in STORING or response.status_code not in (201, 409):
            return
        answer = response.json()
        if path in MAILINGS:
            ids = [answer["id"]] if response.status_code == 201 else []
            for mailing in ids:
                mailings[mailing] = max(mailings.get(mailing, 0), answer["recipients"])
        else:
            ids = [m["id"] for m in answer["messages"]] if "messages" in answer else [answer["id"]]
        key = response.request.headers.get("Idempotency-Key") if path in KEYED else None
        replayed = response.headers.get("idempotent-replayed") == ["true"]
        if response.status_code == 201:
            created.update(ids if path in MESSAGES else ())
            assert replayed == ((path, key) in keyed), (key, keyed)
            replays += replayed
        if key is not None and ids:
            assert keyed.setdefault((path, key), ids[0]) == ids[0], (key, keyed)

    def steer(case: schemathesis.Case, data: st.DataObject) -> None:
        """Aim some cases at messages and mailings that exist and at keys in use."""
        if case.path_parameters and "id" in case.path_parameters:
            stored = sorted(mailings) if case.operation.path.startswith("/api/mailings/") else [
                *seeded, *sorted(created)]  # fmt: skip
            known = data.draw(st.one_of(st.none(), st.sampled_from(stored or [1])))
            case.path_parameters = {"id": case.path_parameters["id"] if known is None else known}
        if case.operation.path in KEYED:
            key = data.draw(st.one_of(st.none(), st.sampled_from(KEYS)))
            if key is not None:
                case.headers = {**(case.headers or {}), "Idempotency-Key": key}

    def fuzz(operation: schemathesis.APIOperation, mode: schemathesis.GenerationMode) -> None:
        # Without the string constants schemathesis gathers from the app's code: in
        # positive cases they would stand in for most addresses and attachments.
        cases = operation.as_strategy(generation_mode=mode, feedback=FeedbackSources())

        @settings(
            max_examples=EXAMPLES if operation.path in STORING else EXAMPLES // 2,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                   HealthCheck.data_too_large],
        )  # fmt: skip
        @given(case=cases, data=st.data())
        def call(case: schemathesis.Case, data: st.DataObject) -> None:
            if mode is schemathesis.GenerationMode.POSITIVE:
                steer(case, data)
            response = case.call(session=client, headers=auth)
            record(case, response)
            case.validate_response(response, checks=CHECKS)

        call()

    for result in schema.get_all_operations():
        for mode in MODES:
            fuzz(result.ok(), mode)
    total = sum(answers.values())
    print(f"{total} fuzzed requests on {db_kind}: {dict(sorted(answers.items()))}, "
          f"{len(created)} messages and {len(mailings)} mailings stored, "
          f"{replays} replayed")  # fmt: skip
    # From the document alone (no strategies of our own): valid messages are made and taken.
    assert answers[201] and len(created) >= 10, answers
    db.session.expire_all()
    rows = db.session.execute(sa.select(Message.id, Message.mailing_id)).all()
    assert set(db.session.scalars(sa.select(Mailing.id))) == set(mailings)
    # Each mailing holds as many rows as its last answer counted; every other row was named.
    assert Counter(mailing for _, mailing in rows if mailing is not None) == +Counter(mailings)
    recipients = {pk for pk, mailing in rows if mailing in mailings}
    assert {pk for pk, _ in rows} == {*seeded, *created, *recipients}
    assert stored_whole() == []
