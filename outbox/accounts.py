"""Staff accounts: creating them, their passwords, and slowing down password guessing."""

import ipaddress
import math
from datetime import datetime, timedelta

from email_validator import EmailNotValidError, validate_email
from sqlalchemy import delete, func, select
from werkzeug.security import check_password_hash, generate_password_hash

from . import audit
from .addresses import address_error
from .extensions import db
from .models import SignInFailure, User, utcnow
from .roles import ROLES

MIN_PASSWORD = 8  # characters
FAILURE_LIMIT = 5  # failed sign-ins from one address ...
FAILURE_WINDOW = timedelta(minutes=15)  # ... within this long lock that address out


class AccountError(Exception):
    """A request about an account that cannot be done; the text says why."""


class TooManyFailures(Exception):
    """This address failed too often lately; retry_after is in seconds."""

    def __init__(self, retry_after: int):
        minutes = -(-retry_after // 60)  # rounded up
        super().__init__(f"try again in {minutes} minute{'s' if minutes != 1 else ''}")
        self.retry_after = retry_after


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


def sign_in(
    email: str, password: str, remote_addr: str, now: datetime | None = None
) -> User | None:
    """The account if the password is right; records failures and refuses guessers."""
    now = now or utcnow()
    since = now - FAILURE_WINDOW
    recent = select(func.count(), func.min(SignInFailure.failed_at)).where(
        SignInFailure.remote_addr == remote_addr, SignInFailure.failed_at > since
    )
    count, oldest = db.session.execute(recent).one()
    if count >= FAILURE_LIMIT:
        raise TooManyFailures(math.ceil((oldest + FAILURE_WINDOW - now).total_seconds()))
    user = find(email)
    # Check a hash even for an unknown address, so timing does not reveal accounts.
    stored = user.password_hash if user else generate_password_hash("not a password")
    if not check_password_hash(stored, password) or user is None:
        typed = email.strip().lower()[:255]
        db.session.add(SignInFailure(remote_addr=remote_addr, failed_at=now, email=typed))
        db.session.execute(delete(SignInFailure).where(SignInFailure.failed_at < since))
        db.session.commit()
        return None
    db.session.execute(delete(SignInFailure).where(SignInFailure.remote_addr == remote_addr))
    user.last_sign_in_at = now
    db.session.commit()
    return user


def lockouts(now: datetime | None = None) -> dict[str, int]:
    """The addresses locked out now, each with its failed sign-ins within FAILURE_WINDOW."""
    since = (now or utcnow()) - FAILURE_WINDOW
    counted = (
        select(SignInFailure.remote_addr, func.count())
        .where(SignInFailure.failed_at > since)
        .group_by(SignInFailure.remote_addr)
        .having(func.count() >= FAILURE_LIMIT)
    )
    found = {addr: count for addr, count in db.session.execute(counted)}
    db.session.commit()
    return found


def unlock_address(remote_addr: str, now: datetime | None = None) -> int:
    """Forget an address's failed sign-ins; how many fell within FAILURE_WINDOW.

    FAILURE_LIMIT or more means it was locked out. An IP address is matched however it
    was spelled (a proxy's X-Forwarded-For may write 2001:DB8:0::1 for 2001:db8::1).
    """
    since = (now or utcnow()) - FAILURE_WINDOW
    wanted = _canonical(remote_addr)
    # A short list: every failure adds one, and drops those older than FAILURE_WINDOW.
    stored = db.session.execute(select(SignInFailure.remote_addr).distinct()).scalars()
    spellings = {addr for addr in stored if _canonical(addr) == wanted}
    mine = SignInFailure.remote_addr.in_(spellings)
    recent = select(func.count()).where(mine, SignInFailure.failed_at > since)
    count = db.session.execute(recent).scalar_one()
    db.session.execute(delete(SignInFailure).where(mine))
    db.session.commit()
    return count


def _canonical(remote_addr: str) -> str:
    try:
        return str(ipaddress.ip_address(remote_addr))
    except ValueError:
        return remote_addr


def unlock_account(email: str, now: datetime | None = None) -> dict[str, int]:
    """Lift the lockouts keeping this account out; what was lifted.

    Failures are counted per client address, never per account (so that nobody can lock
    a colleague out by trying wrong passwords on their account). A locked address keeps
    this person out if one of its failures named their email: those are lifted, and a
    guesser's address that tried only other accounts stays locked. AccountError if there
    is no such account.
    """
    user = find(email)
    if user is None:
        raise AccountError(f"no account for {email}")
    since = (now or utcnow()) - FAILURE_WINDOW
    named = select(SignInFailure.remote_addr).where(
        SignInFailure.email == user.email.lower(), SignInFailure.failed_at > since
    )
    theirs = set(db.session.execute(named.distinct()).scalars())
    locked = {addr: count for addr, count in lockouts(now).items() if addr in theirs}
    for remote_addr in locked:
        unlock_address(remote_addr, now)
    return locked


def load(session_id: str) -> User | None:
    """The user a session names, if the id, its password stamp and sign-out count still match."""
    pk, _, stamp = session_id.partition(".")
    if not pk.isdigit():
        return None
    user = db.session.get(User, int(pk))
    if user is None or user.get_id() != session_id:
        return None
    return user
