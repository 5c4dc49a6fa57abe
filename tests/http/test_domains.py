"""The Domains page and GET /api/domains when OUTBOX_DNS_RESOLVERS cannot be used: said, not
a 500; and the page's check refused without its CSRF token."""

from outbox.auth import tokens

BAD = "dns.example"  # a name, where an IP address must be


def test_unusable_resolvers_are_named_on_the_page_and_in_the_api(app, signed_in):
    app.config["DNS_RESOLVERS"] = BAD
    token = tokens.create("reader", scopes=("read",))
    answer = signed_in.get("/api/domains", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 503
    assert answer.get_json() == {"error": f"OUTBOX_DNS_RESOLVERS: {BAD!r} is not an IP address"}
    page = signed_in.get("/domains")
    assert page.status_code == 200
    assert "OUTBOX_DNS_RESOLVERS: &#39;dns.example&#39; is not an IP address" in page.text
    assert "Check again" not in page.text


def test_the_check_needs_the_csrf_token_and_a_signed_in_user(app, client, signed_in):
    assert signed_in.post("/domains/check").status_code == 400
    assert client.get("/domains").status_code == 302  # to the sign-in page
    assert client.get("/api/domains").status_code == 401
