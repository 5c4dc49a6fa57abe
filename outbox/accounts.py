"""Staff accounts: creating them, their passwords, and slowing down password guessing."""

import math
from datetime import datetime, timedelta

from email_validator import EmailNotValidError, validate_email
from sqlalchemy import delete, func, select
from werkzeug.security import check_password_hash, generate_password_hash

from .extensions import db
from .models import SignInFailure, User, utcnow

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
        raise AccountError(f"{email!r} is not a valid address: {exc}") from None


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


def create_user(email: str, password: str) -> User:
    """A new staff account; AccountError if the address is taken or anything is invalid."""
    email = _checked_email(email)
    if find(email) is not None:
        raise AccountError(f"an account for {email} exists already")
    user = User(email=email, password_hash=_checked_password(password))
    db.session.add(user)
    db.session.commit()
    return user


def set_password(email: str, password: str) -> None:
    """Give an account a new password; its open sessions end."""
    user = find(email)
    if user is None:
        raise AccountError(f"no account for {email}")
    user.password_hash = _checked_password(password)
    db.session.commit()


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
        db.session.add(SignInFailure(remote_addr=remote_addr, failed_at=now))
        db.session.execute(delete(SignInFailure).where(SignInFailure.failed_at < since))
        db.session.commit()
        return None
    db.session.execute(delete(SignInFailure).where(SignInFailure.remote_addr == remote_addr))
    user.last_sign_in_at = now
    db.session.commit()
    return user


def load(session_id: str) -> User | None:
    """The user a session names, if the id and its password stamp still match."""
    pk, _, stamp = session_id.partition(".")
    if not pk.isdigit():
        return None
    user = db.session.get(User, int(pk))
    if user is None or user.get_id() != session_id:
        return None
    return user
