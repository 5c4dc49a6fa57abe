"""Where webhooks may go (the SSRF guard) and how one request goes: against real servers."""

import ipaddress
import ssl
from collections import deque
from pathlib import Path

import pytest
import trustme

from outbox.capabilities.webhooks import post, safety, signing
from tests.support.receiver import Receiver


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "0.0.0.0",
     "100.64.0.1", "224.0.0.1", "240.0.0.1", "255.255.255.255", "::1", "::", "fe80::1",
     "fc00::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "2002:7f00:1::1",
     "64:ff9b::a00:1"],
)  # fmt: skip
def test_private_loopback_link_local_multicast_and_reserved_addresses_are_not_public(address):
    assert not safety.public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"])
def test_public_addresses_are_public(address):
    assert safety.public(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    ("url", "problem"),
    [("ftp://example.com/x", "only http and https"), ("https://user:pw@example.com/", "user name"),
     ("http:///path", "names no host"), ("http://exa mple.com/", "space"),
     ("http://example.com:99999/", "not a URL"), ("", "1 to 2000"),
     ("file:///etc/passwd", "only http and https")],
)  # fmt: skip
def test_a_bad_url_is_refused_naming_the_problem(url, problem):
    with pytest.raises(safety.Refused, match=problem):
        safety.parse(url)


def test_a_url_keeps_its_path_and_query_and_its_host_goes_as_a_labels():
    assert safety.parse("https://Bücher.example/in?a=1") == (
        "https", "xn--bcher-kva.example", 443, "/in?a=1"
    )  # fmt: skip


def test_a_private_host_is_refused_without_the_opt_out_and_taken_with_it():
    with pytest.raises(safety.Refused, match="^127.0.0.1 is a private, loopback"):
        safety.resolve("http://127.0.0.1:8080/hooks")
    with pytest.raises(safety.Refused, match=r"^localhost is (127\.0\.0\.1|::1), a private"):
        safety.resolve("http://localhost/hooks")  # a name is resolved and checked too
    target = safety.resolve("http://localhost:8080/hooks", allow_private=True)
    assert target.host == "localhost" and "127.0.0.1" in target.addresses


def _post(receiver: Receiver, url: str, context: ssl.SSLContext | None = None) -> post.Answer:
    secret = receiver.secret = signing.new_secret()
    target = safety.resolve(url, allow_private=True)
    headers = signing.headers(secret, "evt_1", '{"type":"x"}')
    return post.post(target, b'{"type":"x"}', headers, post.Cutoff(5.0),
                     context or post.tls_context())  # fmt: skip


def test_the_request_goes_to_the_checked_address_with_the_host_named_and_verifies():
    receiver = Receiver().start()
    try:
        answer = _post(receiver, f"http://localhost:{receiver.port}/hooks?x=1")
    finally:
        receiver.stop()
    assert answer.delivered and answer.code == 204, answer
    [request] = receiver.requests
    assert request.path == "/hooks?x=1"
    assert request.headers["host"] == f"localhost:{receiver.port}"
    assert receiver.events == {"evt_1": {"type": "x"}} and not receiver.refused


def test_a_redirect_is_not_followed():
    target = Receiver().start()
    receiver = Receiver(redirect_to=target.url).start()
    try:
        answer = _post(receiver, receiver.url)
    finally:
        receiver.stop()
        target.stop()
    assert not answer.delivered
    assert answer.error == f"HTTP 302: redirect to {target.url} not followed"
    assert target.requests == []


def test_a_refused_connection_and_an_error_status_are_failures_that_say_why():
    receiver = Receiver(answers=deque([500]))
    refused = _post(receiver, receiver.url)  # not started: nothing listens
    assert refused.error == f"connection refused by 127.0.0.1:{receiver.port}"
    receiver.start()
    try:
        failed = _post(receiver, receiver.url)
    finally:
        receiver.stop()
    assert (failed.code, failed.error) == (500, "HTTP 500 Internal Server Error")


def test_a_receiver_that_does_not_answer_in_time_is_cut_off():
    receiver = Receiver(hang=3).start()
    try:
        secret = receiver.secret = signing.new_secret()
        target = safety.resolve(receiver.url, allow_private=True)
        answer = post.post(target, b"{}", signing.headers(secret, "e", "{}"),
                           post.Cutoff(0.5),
                           post.tls_context())  # fmt: skip
    finally:
        receiver.stop()
    assert answer.error == f"no complete answer from 127.0.0.1:{receiver.port} within 0.5s"
    assert answer.latency_ms < 1500


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _tls_receiver(ca: trustme.CA, *names: str) -> Receiver:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(context)
    return Receiver(tls=context).start()


def test_https_is_verified_against_the_url_host_while_connecting_to_its_checked_address(
    ca: trustme.CA, tmp_path: Path
):
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    receiver = _tls_receiver(ca, "localhost")
    url = f"https://localhost:{receiver.port}/hooks"
    try:
        trusted = _post(receiver, url, post.tls_context(str(ca_file)))
        untrusted = _post(receiver, url)  # the system's CAs alone do not know this one
        by_address = _post(receiver, receiver.url, post.tls_context(str(ca_file)))
    finally:
        receiver.stop()
    assert trusted.delivered, trusted
    assert untrusted.error and "TLS certificate of localhost refused" in untrusted.error
    # The certificate names localhost, not 127.0.0.1: the check is against the URL's host.
    assert by_address.error and "TLS certificate of 127.0.0.1 refused" in by_address.error
    assert len(receiver.events) == 1
