"""Staff accounts: creating them, their passwords, and slowing down password guessing."""

import hmac
import ipaddress
import math
import secrets
from datetime import datetime, timedelta
from functools import cache

from email_validator import EmailNotValidError, validate_email
from sqlalchemy import delete, func, select, update
from werkzeug.security import check_password_hash, generate_password_hash

from outbox.auth import audit
from outbox.core.addresses import address_error
from outbox.core.roles import ROLES
from outbox.models import SignInFailure, User, utcnow
from outbox.models.db import db

MIN_PASSWORD = 8  # characters
FAILURE_LIMIT = 5  # failed sign-ins from one client (client_key) ...
ACCOUNT_FAILURE_LIMIT = 20  # ... or at one account, from any clients ...
FAILURE_WINDOW = timedelta(minutes=15)  # ... within this long lock that client or account out


class AccountError(Exception):
    """A request about an account that cannot be done; the text says why."""


class TooManyFailures(Exception):
    """This client or account failed too often lately; retry_after is in seconds."""

    def __init__(self, retry_after: int, whose: str = "from your address"):
        minutes = -(-retry_after // 60)  # rounded up
        super().__init__(f"try again in {minutes} minute{'s' if minutes != 1 else ''}")
        self.retry_after = retry_after
        self.whose = whose  # "from your address" or "at this account"


def _checked_email(email: str) -> str:
    try:
        return validate_email(email, check_deliverability=False).normalized
    except EmailNotValidError as exc:
        raise AccountError(address_error(email, str(exc))) from None


def _checked_password(password: str) -> str:
    if len(password) < MIN_PASSWORD:
        raise AccountError(f"the password needs at least {MIN_PASSWORD} characters")
    return generate_password_hash(password)


def find(email: str) -> User | None:
    """The account with this address, if any."""
    try:
        email = validate_email(email, check_deliverability=False).normalized
    except EmailNotValidError:
        return None
    return db.session.execute(select(User).where(User.email == email)).scalar_one_or_none()


def default_role() -> str:
    """The role of a new account when none is named: admin for the first, viewer after."""
    return "viewer" if db.session.execute(select(User.id).limit(1)).first() else "admin"


def _checked_role(role: str) -> str:
    if role not in ROLES:
        raise AccountError(f"the role must be one of {', '.join(ROLES)}")
    return role


def create_user(email: str, password: str, role: str | None = None) -> User:
    """A new staff account; AccountError if the address is taken or anything is invalid."""
    email = _checked_email(email)
    if find(email) is not None:
        raise AccountError(f"an account for {email} exists already")
    role = _checked_role(role or default_role())
    user = User(email=email, password_hash=_checked_password(password), role=role)
    db.session.add(user)
    db.session.commit()
    audit.record("create_user", detail={"email": email, "role": role})
    return user


def _admins() -> int:
    return int(db.session.execute(select(func.count()).where(User.role == "admin")).scalar_one())


def set_role(email: str, role: str) -> None:
    """Give an account another role; AccountError rather than demote the last admin."""
    user = find(email)
    if user is None:
        raise AccountError(f"no account for {email}")
    role = _checked_role(role)
    if user.role == "admin" and role != "admin" and _admins() <= 1:
        raise AccountError(f"{user.email} is the last admin; make another admin first")
    before, user.role = user.role, role
    db.session.commit()
    audit.record("set_role", detail={"email": user.email, "from": before, "to": role})


def delete_user(email: str) -> None:
    """Remove an account (its sessions end with it); AccountError for the last admin."""
    user = find(email)
    if user is None:
        raise AccountError(f"no account for {email}")
    if user.role == "admin" and _admins() <= 1:
        raise AccountError(f"{user.email} is the last admin; make another admin first")
    email = user.email
    db.session.delete(user)
    db.session.commit()
    audit.record("delete_user", detail={"email": email})


def sign_out(user: User) -> None:
    """End every open session of the account, on the server: copied cookies stop working.

    Each session names the account's session generation (User.get_id); bumping it makes
    all of them stale at once. A sessions table would end only the one signed out of;
    this is the simpler choice, and signing out everywhere is what a leak calls for.
    """
    user.session_generation = (user.session_generation or 0) + 1
    db.session.commit()


def set_password(email: str, password: str) -> None:
    """Give an account a new password; its open sessions end."""
    user = find(email)
    if user is None:
        raise AccountError(f"no account for {email}")
    user.password_hash = _checked_password(password)
    db.session.commit()
    audit.record("set_password", detail={"email": user.email})


def client_key(remote_addr: str) -> str:
    """What a client's failures are counted under: its IPv4 address, or its IPv6 /64.

    One IPv6 host is given a /64 to choose addresses from, so counting per address would
    give it 2**64 tries; each is written one way, however the proxy spelled it. A /64
    itself (as lockouts names it) is its own key.
    """
    try:
        address = ipaddress.ip_address(remote_addr)
    except ValueError:
        try:
            network = ipaddress.ip_network(remote_addr, strict=False)
        except ValueError:
            return remote_addr[:64]
        address = network.network_address
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is None:
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    if isinstance(address, ipaddress.IPv6Address):
        return str(address.ipv4_mapped)
    return str(address)


@cache
def _decoy_hash() -> str:
    """A hash to check an unknown account's password against, made once a process."""
    return generate_password_hash(secrets.token_hex(16))


def sign_in(
    email: str, password: str, remote_addr: str, now: datetime | None = None
) -> User | None:
    """The account if the password is right; records failures and refuses guessers.

    Each try is written (and committed) before its password is checked, then counted
    with the others: of many tries at once, those past the limit see it reached and are
    refused, so no more than FAILURE_LIMIT passwords are checked for one client however
    many arrive together. A refused try is forgotten; a wrong one stays, a failure.
    """
    now = now or utcnow()
    user = find(email)
    named = user.email.lower() if user else email.strip().lower()[:255]
    client = client_key(remote_addr)
    attempt = SignInFailure(remote_addr=client, failed_at=now, email=named)
    db.session.add(attempt)
    db.session.commit()
    try:
        _refuse_guessers(client, named, now)
    except TooManyFailures:
        _forget(attempt)
        raise
    # An unknown account's password is checked too, against a decoy: both take one hash,
    # so timing does not reveal which accounts exist.
    if not check_password_hash(user.password_hash if user else _decoy_hash(), password):
        user = None
    if user is None:
        db.session.execute(
            delete(SignInFailure).where(SignInFailure.failed_at < now - FAILURE_WINDOW)
        )
        db.session.commit()
        return None
    _forget(attempt)
    # The account's failures stop naming it: they count for their clients still.
    db.session.execute(update(SignInFailure).where(SignInFailure.email == named).values(email=None))
    user.last_sign_in_at = now
    db.session.commit()
    return user


def _refuse_guessers(client: str, named: str, now: datetime) -> None:
    """TooManyFailures if the client or the account has had its tries, this one counted."""
    since = now - FAILURE_WINDOW
    by_client = SignInFailure.remote_addr == client
    by_account = SignInFailure.email == named
    checks = ((by_client, FAILURE_LIMIT, "from your address"),
              (by_account, ACCOUNT_FAILURE_LIMIT, "at this account"))  # fmt: skip
    for mine, limit, whose in checks:
        counted = select(func.count(), func.min(SignInFailure.failed_at)).where(
            mine, SignInFailure.failed_at > since
        )
        count, oldest = db.session.execute(counted).one()
        if count > limit:
            db.session.rollback()
            wait = math.ceil((oldest + FAILURE_WINDOW - now).total_seconds())
            raise TooManyFailures(max(wait, 1), whose)
    db.session.commit()


def _forget(attempt: SignInFailure) -> None:
    """Delete a try that was no failure: refused unchecked, or the right password."""
    db.session.execute(delete(SignInFailure).where(SignInFailure.id == attempt.id))
    db.session.commit()


def lockouts(now: datetime | None = None) -> dict[str, int]:
    """The clients and accounts locked out now, each with its failed sign-ins in the window."""
    since = (now or utcnow()) - FAILURE_WINDOW
    found: dict[str, int] = {}
    for column, limit in ((SignInFailure.remote_addr, FAILURE_LIMIT),
                          (SignInFailure.email, ACCOUNT_FAILURE_LIMIT)):  # fmt: skip
        counted = (
            select(column, func.count())
            .where(SignInFailure.failed_at > since, column.is_not(None))
            .group_by(column)
            .having(func.count() >= limit)
        )
        found.update({str(key): count for key, count in db.session.execute(counted)})
    db.session.commit()
    return found


def unlock_address(remote_addr: str, now: datetime | None = None) -> int:
    """Forget a client's failed sign-ins; how many fell within FAILURE_WINDOW.

    FAILURE_LIMIT or more means it was locked out. The address is matched by its
    client_key: any spelling of it, and for IPv6 any address of its /64.
    """
    since = (now or utcnow()) - FAILURE_WINDOW
    mine = SignInFailure.remote_addr == client_key(remote_addr)
    recent = select(func.count()).where(mine, SignInFailure.failed_at > since)
    count = db.session.execute(recent).scalar_one()
    db.session.execute(delete(SignInFailure).where(mine))
    db.session.commit()
    return count


def unlock_account(email: str, now: datetime | None = None) -> dict[str, int]:
    """Lift the lockouts keeping this account out; what was lifted.

    Failures are counted per client and per account. A client is locked out after
    FAILURE_LIMIT failures, whichever accounts it tried; an account after
    ACCOUNT_FAILURE_LIMIT, from any clients, which needs several of them (so that one
    person cannot lock a colleague out). Lifted here: the account's own lockout, and
    those of the locked clients that tried this account (a guesser's client that tried
    only other accounts stays locked). AccountError if there is no such account.
    """
    user = find(email)
    if user is None:
        raise AccountError(f"no account for {email}")
    since = (now or utcnow()) - FAILURE_WINDOW
    named = select(SignInFailure.remote_addr).where(
        SignInFailure.email == user.email.lower(), SignInFailure.failed_at > since
    )
    theirs = set(db.session.execute(named.distinct()).scalars())
    locked = lockouts(now)
    lifted = {key: count for key, count in locked.items() if key in theirs}
    for remote_addr in lifted:
        unlock_address(remote_addr, now)
    if user.email.lower() in locked:
        lifted[user.email] = locked[user.email.lower()]
        db.session.execute(delete(SignInFailure).where(SignInFailure.email == user.email.lower()))
        db.session.commit()
    return lifted


def load(session_id: str) -> User | None:
    """The user a session names, if the id, its password stamp and sign-out count still match."""
    pk, _, stamp = session_id.partition(".")
    if not pk.isdigit():
        return None
    user = db.session.get(User, int(pk))
    if user is None or not hmac.compare_digest(user.get_id().encode(), session_id.encode()):
        return None
    return user
