"""What both producers hold and do without I/O: :class:`ProducerBase`, the base of
:class:`~tether.producer.client.Producer` and :class:`~tether.producer.client_aio.AsyncProducer`
(httpx's ``BaseClient``): the settings, the key schema and the producer's feed, the Celery app,
one completion listener per tenant, handles, and run messages. Each producer adds its I/O.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar

from celery import Celery

from tether.ids import new_id, validate_tenant
from tether.keys import RedisKeys
from tether.observability.url_masking import install_url_masking
from tether.producer.publish import build_celery_app
from tether.producer.submission import Message, Submitted, message_of, run_id_arg
from tether.runs.contract import WireRequest
from tether.settings import Settings, load_settings

H = TypeVar("H")  # the producer's handle (RunHandle or AsyncRunHandle)
L = TypeVar("L")  # its completion listener


class ProducerBase(ABC, Generic[H, L]):
    """The part of a producer that does no I/O.

    Args:
        settings: settings (default: read from the environment).
        celery_app: an existing Celery app to publish with (default: one built from settings).
        overrides: setting overrides, e.g. ``broker_url=...``, ``redis_url=...``.
    """

    def __init__(
        self, settings: Settings | None, celery_app: Celery | None, overrides: dict[str, Any]
    ) -> None:
        install_url_masking(root_handlers=False)  # no URL credential in a log line (#47 W3)
        self.settings = settings or load_settings(**overrides)
        self.keys = RedisKeys(self.settings.namespace)
        self._celery = celery_app
        self._celery_lock = threading.Lock()
        #: One completion listener per tenant this producer submitted to (see listener_for).
        self._listeners: dict[str, L] = {}
        #: This producer's completion feed: workers announce its runs there (RunRequest.reply_to)
        self.producer_id = new_id("p")
        self.feed = self.keys.feed(self.settings.tenant, self.producer_id)

    @abstractmethod
    def _new_handle(
        self,
        run_id: str,
        *,
        request_id: str | None = None,
        session_id: str | None = None,
        tenant: str | None = None,
        queued_after: float | None = None,
    ) -> H:
        """This producer's handle on ``run_id`` (no I/O)."""

    @abstractmethod
    def _new_listener(self, feed: str) -> L:
        """A completion listener of ``feed`` (no I/O: it starts on first use)."""

    @property
    def celery(self) -> Celery:
        """The Celery app used to publish (built on first use)."""
        with self._celery_lock:
            if self._celery is None:
                self._celery = build_celery_app(self.settings)
            return self._celery

    @property
    def listener(self) -> L:
        """The completion listener of this producer's own tenant (``settings.tenant``)."""
        return self.listener_for(self.settings.tenant)

    def listener_for(self, tenant: str) -> L:
        """The completion listener of ``tenant``'s runs.

        Workers announce a run on the feed of its own tenant (a tenant's ACL user reads only
        its tenant's keys), so a producer that submits to several tenants reads one feed per
        tenant; with a single listener, the runs of the other tenants would wait for the
        periodic recheck instead of their announcement.
        """
        with self._celery_lock:
            listener = self._listeners.get(tenant)
            if listener is None:
                feed = self.keys.feed(tenant, self.producer_id)
                listener = self._listeners[tenant] = self._new_listener(feed)
            return listener

    def _feeds(self) -> list[tuple[L, str]]:
        """Each listener with the feed it reads (closing the producer drops the feeds)."""
        feed = self.keys.feed
        return [(li, feed(tenant, self.producer_id)) for tenant, li in self._listeners.items()]

    def _scope(self, tenant: str | None) -> str:
        """The tenant a call acts for, validated (default: this producer's)."""
        return validate_tenant(tenant or self.settings.tenant)

    def handle(self, run_id: str, *, tenant: str | None = None) -> H:
        """A handle on an existing run of ``tenant`` (default: this producer's) from any
        process; does no I/O. Another tenant's run settles with :class:`RunNotFound`."""
        return self._new_handle(run_id_arg(run_id), tenant=self._scope(tenant))

    def _handle_for(self, submitted: Submitted, queued_after: float | None) -> H:
        request = submitted.request
        return self._new_handle(
            submitted.run_id,
            request_id=request.request_id,
            session_id=request.session_id,
            tenant=request.tenant,
            # only a run this submission queued announces itself on this producer's feed
            queued_after=queued_after if submitted.queued else None,
        )

    def _message(self, wire: WireRequest) -> Message:
        """The run message of ``wire`` (only its ids with TETHER_REGISTERED_RUNS_ONLY)."""
        return message_of(self.settings, wire)
