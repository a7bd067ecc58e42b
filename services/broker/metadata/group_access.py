"""The gate every consumer-group request passes: name, existence, permission.

Pulls, heartbeats and offset commits all name a consumer group. The group
must have a valid name, exist (or be auto-created, charged to the caller's
:class:`CreationLimits`, then saved at once so it survives a restart) and
allow consumption.
"""

from __future__ import annotations

from typing import Protocol

from services.broker.errors import NotFound, PermissionDenied
from services.broker.metadata.names import check_group
from services.broker.metadata.persister import MetadataPersister
from services.broker.metadata.subscription_group import (
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)


class CreationCharges(Protocol):
    """What a group creation is charged to (the broker's
    :class:`~services.broker.access.creation_limits.CreationLimits`)."""

    def charge(self, count: int, what: str) -> None: ...


class GroupAccess:
    """Checks and auto-creates consumer groups."""

    def __init__(
        self,
        groups: SubscriptionGroupManager,
        persister: MetadataPersister,
        creations: CreationCharges,
    ) -> None:
        self._groups = groups
        self._persister = persister
        self._creations = creations

    @property
    def auto_create(self) -> bool:
        """True when unknown groups are created on first use."""
        return self._groups.auto_create

    def settings(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's settings, or None when unknown (nothing created)."""
        return self._groups.get(group)

    def exists(self, group: str) -> bool:
        """True when the group has settings (no creation needed)."""
        return self._groups.get(group) is not None

    async def require(
        self, field: str, group: str, *, charged: bool = False
    ) -> SubscriptionGroupConfig:
        """The group's settings, creating the group when allowed; raise naming ``field``.

        A creation is charged to the caller's creation limits unless the caller
        already did (``charged``: a heartbeat charges all its creations at once)."""
        check_group(field, group)
        config = self._groups.get(group)
        if config is None:
            if self.auto_create and not charged:
                self._creations.charge(1, field)
            config = self._groups.find_or_create(group)
            if config is None:
                raise NotFound(
                    f"{field}: consumer group {group!r} does not exist "
                    f"(auto_create_subscription_group is off)"
                )
            await self._persister.save_groups()
        return config

    async def require_consumable(self, field: str, group: str) -> SubscriptionGroupConfig:
        """As :meth:`require`, and the group must be allowed to consume."""
        config = await self.require(field, group)
        self.check_consumable(field, group)
        return config

    def check_consumable(self, field: str, group: str) -> None:
        """PermissionDenied when the group's consumeEnable is false (again after a pull
        was parked: an operator may have turned consumption off meanwhile)."""
        config = self._groups.get(group)
        if config is not None and not config.consume_enable:
            raise PermissionDenied(
                f"{field}: consumer group {group!r} is not allowed to "
                f"consume (consumeEnable is false)"
            )
