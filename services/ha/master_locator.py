"""Where a replica's master HA service is: the static address, else the registries.

A broker group is a ``broker_name``; its master is the live broker with id 0
(docs/ha.md), and each broker registers the HA address of the HA service beside
its store. When several registries disagree during a failover the first that
answers wins; the next reconnect asks again.
"""

from __future__ import annotations

from boltmq.kernel.registry_client import AsyncRegistryClient, RegistryError
from boltmq.kernel.tls import ClientTLS
from boltmq.v1 import registry_pb2
from services.ha.config import HAConfig
from services.ha.errors import MasterUnknown

MASTER_BROKER_ID = 0


def pick_master(
    info: registry_pb2.ClusterInfo, cluster_name: str, broker_name: str
) -> registry_pb2.BrokerLiveInfo | None:
    """The group's live master (the newest epoch if two claim it), or None."""
    masters = [
        b
        for b in info.brokers
        if b.cluster_name == cluster_name
        and b.broker_name == broker_name
        and b.broker_id == MASTER_BROKER_ID
    ]
    return max(masters, key=lambda b: (b.epoch, b.last_update_ms), default=None)


class MasterLocator:
    """Answers "which master HA address do I follow now?" for the follower."""

    def __init__(self, config: HAConfig, tls: ClientTLS | None = None) -> None:
        self._config = config
        self._registry = (
            AsyncRegistryClient(
                config.registry_address_list,
                rpc_timeout_s=config.registry_timeout_ms / 1000,
                attempts_max=1,
                tls=tls,
            )
            if config.registry_address_list and not config.master_address
            else None
        )

    async def close(self) -> None:
        """Close the registry channels."""
        if self._registry is not None:
            await self._registry.close()

    async def locate(self, own_address: str) -> str:
        """The master's HA address; MasterUnknown when there is none to follow."""
        config = self._config
        if config.master_address:
            return config.master_address
        if self._registry is None:
            raise MasterUnknown("neither master_address nor registry_addresses is set")
        try:
            info = await self._registry.cluster_info()
        except RegistryError as exc:
            raise MasterUnknown(f"cannot ask the registries for the master: {exc}") from None
        master = pick_master(info, config.cluster_name, config.broker_name)
        if master is None:
            raise MasterUnknown(
                f"no live master (broker id 0) of {config.cluster_name}/"
                f"{config.broker_name} in the registries"
            )
        if not master.ha_address:
            raise MasterUnknown(f"the master broker {master.address} registered no ha_address")
        if master.ha_address == own_address:
            raise MasterUnknown(
                "the registries name this HA service's own address as the "
                "master (the broker registered as master over a replica store)"
            )
        return master.ha_address
