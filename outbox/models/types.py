"""Column types and the clock every table shares."""

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Dialect, Integer, LargeBinary, String, Text
from sqlalchemy.dialects import mysql
from sqlalchemy.types import TypeDecorator

from outbox.core.recipients import Recipient, decode, encode

# SQLite only numbers rows by itself for a plain INTEGER primary key.
Id = BigInteger().with_variant(Integer(), "sqlite")
# The ids an Id column can hold: past 2**63 - 1, PostgreSQL and SQLite raise an error on a
# look-up where MariaDB finds nothing, so an id from outside is checked against this first.
ID_RANGE = range(1, 2**63)
# MySQL and MariaDB keep whole seconds unless told otherwise; the queue orders by
# these columns, so keep microseconds everywhere. All timestamps are naive UTC.
Timestamp = DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
# TEXT is 64 KiB on MySQL; bodies may be far larger.
LongText = Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
# One attachment is split into chunks of this many bytes, so that no single row
# comes near MySQL's max_allowed_packet (16 MiB by default) and no read holds more
# than a chunk of it at a time besides the message being built.
CHUNK_BYTES = 1024 * 1024
# Identifiers compared exactly: MySQL's default collation would fold case.
Key = String(255).with_variant(mysql.VARCHAR(255, collation="utf8mb4_bin"), "mysql", "mariadb")
# An accepting server's reply is kept up to this many characters: it names the queue id.
REPLY_CHARS = 255
Blob = LargeBinary().with_variant(mysql.MEDIUMBLOB(), "mysql", "mariadb")


class Recipients(TypeDecorator[list[Recipient]]):
    """The recipients column: JSON in the table, Recipient entries in Python (recipients.encode
    and decode), for the ORM and Core statements alike."""

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        return None if value is None else encode(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> list[Recipient] | None:
        return None if value is None else decode(value)


def utcnow() -> datetime:
    """The current time as the naive UTC datetime the tables hold."""
    return datetime.now(UTC).replace(tzinfo=None)
