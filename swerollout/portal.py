"""Blocking calls into an asyncio object that lives on its own event loop, in a thread of
its own (anyio's blocking portal). The one home of the rule behind every blocking facade
(the sync `RolloutClient` and `KubeClient`, slime's `generate_rollout`): the async code
is the only implementation, and a blocking call hands one coroutine to the portal and
waits.

A facade is a `Blocking` whose operations are the async methods made blocking, one line
each, so the two cannot drift (same parameters, docstring, result and exceptions)::

    class KubeClient(Blocking[AsyncKubeClient]):
        get = blocking(AsyncKubeClient.get)
        watch = blocking_stream(AsyncKubeClient.watch)

So a blocking facade also works where an event loop already runs in the caller's thread
(a Jupyter cell, sync code called by an async worker): the call blocks that loop while it
waits, as any blocking call does, but never runs on it. Many threads may call at once;
their calls run concurrently on the portal's loop.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Self, TypeVar

if TYPE_CHECKING:
    from anyio.from_thread import BlockingPortal

__all__ = ["Blocking", "Portal", "blocking", "blocking_stream"]

T = TypeVar("T")
A = TypeVar("A")
# Covariant: a facade over AsyncRolloutClient serves the methods of the mixins it is made of.
A_co = TypeVar("A_co", covariant=True)
P = ParamSpec("P")

_OPEN: set[Portal[Any]] = set()
_OPEN_LOCK = threading.Lock()
_HOOKED = False


def _close_open_portals() -> None:
    with _OPEN_LOCK:
        portals = list(_OPEN)
    for portal in portals:
        portal.close()


def _hold_until_closed(portal: Portal[Any]) -> None:
    # A script that ends without close() would never exit on anyio releases whose portal
    # thread is not a daemon: the interpreter waits for that thread before any atexit hook
    # runs. threading's own pre-join hooks run first (concurrent.futures stops its workers
    # there), so close what is still open there. The set holds each portal until it is
    # closed: a facade dropped without close() leaves its thread running, and that thread
    # must still be stopped at exit.
    global _HOOKED
    with _OPEN_LOCK:
        _OPEN.add(portal)
        if not _HOOKED:
            threading._register_atexit(_close_open_portals)  # type: ignore[attr-defined]
            _HOOKED = True


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


class Portal(Generic[A_co]):
    """An asyncio object (``inner``) on its own loop thread, and the blocking calls into it.

    ``build`` makes the object inside the portal's loop (HTTP clients bind to the loop they
    are created in); ``aclose`` is awaited there by :meth:`close`.
    """

    def __init__(self, build: Callable[[], Awaitable[A_co]], aclose: Callable[[A_co], Awaitable[None]]) -> None:
        # Here, not at the top: everything that imports swerollout.kube (the operator, the
        # runner) would otherwise load anyio's thread machinery without ever blocking.
        from anyio.from_thread import start_blocking_portal

        self._cm: AbstractContextManager[BlockingPortal] = start_blocking_portal(backend="asyncio")
        self._portal = self._cm.__enter__()
        try:
            self._loop_thread = self._portal.call(threading.get_ident)
            inner = self._portal.call(build)
        except BaseException as exc:
            self._cm.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._inner = inner
        self._aclose: Callable[[], Awaitable[None]] = lambda: aclose(inner)
        self._closed = False
        self._close_lock = threading.Lock()
        _hold_until_closed(self)

    @property
    def inner(self) -> A_co:
        return self._inner

    @property
    def closed(self) -> bool:
        return self._closed

    def run(self, coro: Awaitable[T], *, what: str = "client") -> T:
        """Await ``coro`` on the portal's loop; block until it is done and return its result
        (or raise its exception, type and all)."""
        if self._closed:
            close = getattr(coro, "close", None)
            if close is not None:
                close()  # never awaited: say so quietly instead of a RuntimeWarning
            raise RuntimeError(f"this {what} is closed")
        future = self._portal.start_task_soon(_await, coro)
        try:
            return future.result()
        except BaseException:
            # Interrupted here (Ctrl-C in a watch): cancel the call in the portal too, or
            # closing would wait for it forever and the loop would be torn down under it.
            future.cancel()
            raise

    def iterate(self, stream: AsyncIterator[T], *, what: str = "client") -> Iterator[T]:
        """The items of an async iterator that runs on the portal's loop, one blocking step
        each. Leaving the loop early (break, an exception, closing the generator) closes
        ``stream`` there too, so a watch's connection does not outlive its reader."""
        try:
            while True:
                try:
                    yield self.run(stream.__anext__(), what=what)
                except StopAsyncIteration:
                    return
        finally:
            aclose = getattr(stream, "aclose", None)
            # Closed meanwhile: its loop is gone, and the stream with it. On the loop's own
            # thread (a generator collected there) no blocking call can be made; the loop's
            # async-generator hooks finalize the stream instead.
            if aclose is not None and not self._closed and not self._on_loop_thread():
                self.run(aclose(), what=what)

    def _on_loop_thread(self) -> bool:
        return self._loop_thread == threading.get_ident()

    def close(self) -> None:
        """Await ``aclose(inner)``, then stop the loop and its thread. Calls still in flight
        from other threads are cancelled (they raise ``CancelledError``). Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            try:
                self.run(self._aclose())
            finally:
                self._closed = True
                with _OPEN_LOCK:
                    _OPEN.discard(self)
                try:
                    self._portal.call(self._portal.stop, True)
                except RuntimeError:
                    pass  # the loop already ended
                self._cm.__exit__(None, None, None)


class Blocking(Generic[A_co]):
    """Base of a blocking facade over the asyncio object behind ``_portal``: close it, or
    use ``with``. Safe to share between threads."""

    _portal: Portal[A_co]

    def close(self) -> None:
        self._portal.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


def blocking(method: Callable[Concatenate[A, P], Awaitable[T]]) -> Callable[Concatenate[Blocking[A], P], T]:
    """The async ``method`` as a blocking method of a facade (help() and inspect show its
    parameters and docstring)."""

    def call(self: Blocking[A], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._portal.run(method(self._portal.inner, *args, **kwargs), what=type(self).__name__)

    functools.update_wrapper(call, method)
    return call


def blocking_stream(
    method: Callable[Concatenate[A, P], AsyncIterator[T]],
) -> Callable[Concatenate[Blocking[A], P], Iterator[T]]:
    """The async iterator ``method`` as a blocking one (see `Portal.iterate`)."""

    def call(self: Blocking[A], /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return self._portal.iterate(method(self._portal.inner, *args, **kwargs), what=type(self).__name__)

    functools.update_wrapper(call, method)
    return call
