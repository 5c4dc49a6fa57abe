"""The queue's hook points: what the layers above it register at start (outbox.app) to act
as messages are stored, their outcomes recorded and failed ones queued again.

The queue imports none of them. Each point's hooks run in the order they were registered,
in the caller's transaction, before it commits, so what they write is kept exactly when
what the queue wrote is. They are kept in app.extensions, so every app has its own; a
queue function finds them through the app of its context, which it needs anyway for the
database.
"""

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from flask import Flask, current_app

from outbox.core.status import Status

if TYPE_CHECKING:  # outcomes calls the hooks below
    from outbox.queue.outcomes import Finished

KEY = "outbox.queue.hooks"  # the app's Hooks, in app.extensions


class Screen(Protocol):
    """Look at new message rows before they are inserted and change them in place (their
    recipients, their status); by the row's index, how many of its recipients it marked.

    It may refuse them all by raising. batch: the rows are a batch's, whose errors name
    each row's index.
    """

    def __call__(
        self, rows: list[dict[str, Any]], now: datetime, *, batch: bool
    ) -> dict[int, int]: ...


# Told, after the INSERT, the rows a Screen marked, each with its new id.
Announce = Callable[[Sequence[tuple[int, dict[str, Any]]], datetime], object]


@dataclass(frozen=True)
class Written:
    """A group of outcomes queue.record wrote, as the hooks see it before the commit."""

    finished: Sequence["Finished"]  # as the worker gave them
    # Each with the error written for it (a last deferral's names the attempts given up
    # after), in the order the UPDATEs wrote them.
    errors: Sequence[tuple["Finished", str | None]]
    statuses: Mapping[int, Status]  # each message written, its new status; a claim lost: left out


# An outcome group written; a dead worker's claim taken back (pk, Message-ID, new status,
# error, when); any message's new status (both of those, after their own hooks);
# failed or cancelled messages about to be queued again (these ids, or None: every
# failed one), the ids it finds with no one left to send to.
Outcomes = Callable[[Written], object]
Lost = Callable[[int, str, Status, str, datetime], object]
Recorded = Callable[[Mapping[int, Status]], object]
Requeue = Callable[[Collection[int] | None], set[int]]


@dataclass
class Hooks:
    """An app's hooks, each point's in the order they run."""

    screens: list[Screen] = field(default_factory=list)
    announcements: list[Announce] = field(default_factory=list)
    outcomes: list[Outcomes] = field(default_factory=list)
    lost: list[Lost] = field(default_factory=list)
    recorded: list[Recorded] = field(default_factory=list)
    requeue: list[Requeue] = field(default_factory=list)


def of(app: Flask) -> Hooks:
    """The app's hooks, made empty the first time they are asked for."""
    found = app.extensions.get(KEY)
    if found is None:
        found = app.extensions[KEY] = Hooks()
    assert isinstance(found, Hooks)
    return found


def _current() -> Hooks:
    """The hooks of the context's app: one look into its extensions (enqueue's hot path)."""
    found: Hooks | None = current_app.extensions.get(KEY)
    return found if found is not None else of(current_app)


# --- registering, at start ---
def on_store(app: Flask, screen: Screen, announce: Announce) -> None:
    """Have screen look at every new message row, and announce told of the rows it marked."""
    of(app).screens.append(screen)
    of(app).announcements.append(announce)


def on_outcomes(app: Flask, hook: Outcomes) -> None:
    """Have hook run with every group of outcomes the app records."""
    of(app).outcomes.append(hook)


def on_lost(app: Flask, hook: Lost) -> None:
    """Have hook run with every claim of a dead worker taken back."""
    of(app).lost.append(hook)


def on_recorded(app: Flask, hook: Recorded) -> None:
    """Have hook run with the new statuses of every group of outcomes the app records,
    taken-back claims too, after the hooks of on_outcomes and on_lost."""
    of(app).recorded.append(hook)


def on_requeue(app: Flask, hook: Requeue) -> None:
    """Have hook bring failed or cancelled messages up to date before they are queued again."""
    of(app).requeue.append(hook)


# --- running, from the queue's verbs ---
def screened(rows: list[dict[str, Any]], now: datetime, *, batch: bool = False) -> list[int]:
    """The indices of the rows the screens marked, in order; each screen runs after the
    one before."""
    marked: set[int] = set()
    for screen in _current().screens:
        marked.update(screen(rows, now, batch=batch))
    return sorted(marked) if marked else []


def announce(stored: Sequence[tuple[int, dict[str, Any]]], now: datetime) -> None:
    """Tell the announcements of the marked rows just inserted, with their ids."""
    for hook in _current().announcements:
        hook(stored, now)


def written(done: Written) -> None:
    """Run the hooks of an outcome group written, then those of its new statuses."""
    hooks = _current()
    for hook in hooks.outcomes:
        hook(done)
    for recorded in hooks.recorded:
        recorded(done.statuses)


def lost(pk: int, message_id: str, new: Status, error: str, at: datetime) -> None:
    """Run the hooks of a claim taken back, then those of its new status."""
    hooks = _current()
    for hook in hooks.lost:
        hook(pk, message_id, new, error, at)
    for recorded in hooks.recorded:
        recorded({pk: new})


def requeue(ids: Collection[int] | None) -> set[int]:
    """Run the hooks of messages about to be queued again; the ids any found with no one left."""
    nobody: set[int] = set()
    for hook in _current().requeue:
        nobody |= hook(ids)
    return nobody
