"""Many wrong passwords at once from one address, over real HTTP against a served app:
the failure count holds on every database, so no more than FAILURE_LIMIT are checked."""

import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.cookiejar import CookieJar
from urllib.error import HTTPError
from urllib.parse import urlencode
from urllib.request import HTTPCookieProcessor, OpenerDirector, Request, build_opener

import pytest
from flask import Flask
from sqlalchemy import func, select
from werkzeug.serving import make_server

from outbox.auth import accounts
from outbox.models import SignInFailure
from outbox.models.db import db

AT_ONCE = 24
TOKEN = re.compile(r'name="csrf_token" type="hidden" value="([^"]+)"')


@pytest.fixture
def served(app: Flask) -> Iterator[str]:
    """The app served by Werkzeug, a thread a request, on a port the OS chose."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    serving = threading.Thread(target=server.serve_forever, name="served")
    serving.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.shutdown()
        serving.join()
        server.server_close()


def _form(url: str) -> tuple[OpenerDirector, str]:
    """A browser of its own (cookies) and the CSRF token of the sign-in page it opened."""
    browser = build_opener(HTTPCookieProcessor(CookieJar()))
    with browser.open(f"{url}/sign-in", timeout=60) as page:
        found = TOKEN.search(page.read().decode())
    assert found, "no CSRF token on the sign-in page"
    return browser, found[1]


def _post(browser: OpenerDirector, url: str, token: str, password: str) -> int:
    form = {"csrf_token": token, "email": "staff@example.com", "password": password}
    try:
        with browser.open(Request(f"{url}/sign-in", urlencode(form).encode()), timeout=120):
            return 200
    except HTTPError as answer:
        return answer.code


@pytest.mark.all_databases
def test_wrong_passwords_sent_at_once_are_checked_no_more_than_the_limit(served, staff):
    forms = [_form(served) for _ in range(AT_ONCE)]
    start = threading.Barrier(AT_ONCE)

    def guess(form: tuple[OpenerDirector, str]) -> int:
        start.wait(timeout=60)
        return _post(form[0], served, form[1], "a wrong guess")

    with ThreadPoolExecutor(AT_ONCE) as pool:
        answers = list(pool.map(guess, forms))
    checked = answers.count(401)  # "Wrong email or password": the password was checked
    assert sorted(set(answers)) in ([401, 429], [429]), answers
    assert checked <= accounts.FAILURE_LIMIT, answers
    failures = db.session.scalar(select(func.count()).select_from(SignInFailure))
    db.session.commit()
    assert failures == checked  # the refused tries left nothing behind
    # The refused tries did not count: the address has its remaining tries, then none.
    for _ in range(accounts.FAILURE_LIMIT - checked):
        browser, token = _form(served)
        assert _post(browser, served, token, "a wrong guess") == 401
    browser, token = _form(served)
    assert _post(browser, served, token, "correct horse") == 429
