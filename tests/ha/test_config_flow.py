"""Adding our server to Home Assistant: by hand, by zeroconf, and by the add-on's Supervisor discovery.

All three through homeassistant/components/wyoming/config_flow.py (`async_step_user`, `async_step_zeroconf` and
`async_step_zeroconf_confirm`, `async_step_hassio` and `async_step_hassio_confirm`), which ask our server `describe`
(wyoming/data.py `load_wyoming_info`: 1 s per try) and set up an entry with one STT and one TTS entity.
"""

from __future__ import annotations

from ipaddress import ip_address

import pytest
from conftest import WisServer, add_server, entity_ids, wyoming_warnings
from homeassistant import config_entries
from homeassistant.core import HomeAssistant
from homeassistant.data_entry_flow import FlowResultType

try:  # HA 2025.1 moved the discovery payloads to helpers
    from homeassistant.helpers.service_info.hassio import HassioServiceInfo
    from homeassistant.helpers.service_info.zeroconf import ZeroconfServiceInfo
except ImportError:  # HA 2024.3
    from homeassistant.components.hassio import HassioServiceInfo
    from homeassistant.components.zeroconf import ZeroconfServiceInfo

SERVICE_TYPE = "_wyoming._tcp.local."
NAME = "wyoming-wis"  # what our `info` calls the ASR program, the title HA gives the entry


async def test_user_step_adds_stt_tts_and_wake_word(
    hass: HomeAssistant, wis_server: WisServer, caplog: pytest.LogCaptureFixture
) -> None:
    entry = await add_server(hass, wis_server.host, wis_server.port)
    assert entry.title == NAME
    assert entry.data == {"host": wis_server.host, "port": wis_server.port}
    ids = entity_ids(hass, entry)
    assert sorted(ids) == ["stt", "tts", "wake_word"], ids
    for entity_id in ids.values():
        assert hass.states.get(entity_id) is not None, entity_id
    assert wyoming_warnings(caplog) == []


def zeroconf_info(port: int, instance: str = "wyoming-wis-3fa9c1") -> ZeroconfServiceInfo:
    """What HA's zeroconf (zeroconf/__init__.py or discovery.py `info_from_service`) makes of our announcement
    (wyoming_wis/discovery.py: instance `wyoming-wis-XXXXXX` kept in the data dir, a real address, no TXT; the
    SRV target defaults to the instance name)."""
    address = ip_address("127.0.0.1")
    return ZeroconfServiceInfo(
        ip_address=address,
        ip_addresses=[address],
        port=port,
        hostname=f"{instance}.{SERVICE_TYPE}",
        type=SERVICE_TYPE,
        name=f"{instance}.{SERVICE_TYPE}",
        properties={},
    )


async def test_zeroconf_discovery(hass: HomeAssistant, wis_server: WisServer, caplog: pytest.LogCaptureFixture) -> None:
    info = zeroconf_info(wis_server.port)
    result = await hass.config_entries.flow.async_init(
        "wyoming", context={"source": config_entries.SOURCE_ZEROCONF}, data=info
    )
    assert result["type"] == FlowResultType.FORM and result["step_id"] == "zeroconf_confirm", result
    assert result["description_placeholders"] == {"name": NAME}
    result = await hass.config_entries.flow.async_configure(result["flow_id"], {})
    assert result["type"] == FlowResultType.CREATE_ENTRY, result
    await hass.async_block_till_done()
    entry = result["result"]
    assert entry.title == NAME
    assert entry.data == {"host": "127.0.0.1", "port": wis_server.port}
    assert entry.unique_id == f"{info.name}_{NAME}"  # our stable instance name keeps it one device
    assert entry.state == config_entries.ConfigEntryState.LOADED
    assert sorted(entity_ids(hass, entry)) == ["stt", "tts", "wake_word"]

    # The same announcement again (a restart of the server) is the same device, not a new discovery
    again = await hass.config_entries.flow.async_init(
        "wyoming", context={"source": config_entries.SOURCE_ZEROCONF}, data=zeroconf_info(wis_server.port)
    )
    assert again["type"] == FlowResultType.ABORT and again["reason"] == "already_configured", again
    assert wyoming_warnings(caplog) == []


async def test_supervisor_discovery(
    hass: HomeAssistant, wis_server: WisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The payload addon/rootfs/etc/s6-overlay/s6-rc.d/discovery/run sends: {"uri": "tcp://HOSTNAME:PORT"}."""
    info = HassioServiceInfo(
        config={"uri": f"tcp://{wis_server.host}:{wis_server.port}"},
        name=NAME,  # addon/config.yaml `name`
        slug="5c53de3b_wyoming_wis",  # a repository add-on's slug: the repository's hash, then config.yaml `slug`
        uuid="0f4b5c1e2d3a49b8a7c6d5e4f3a2b1c0",
    )
    result = await hass.config_entries.flow.async_init(
        "wyoming", context={"source": config_entries.SOURCE_HASSIO}, data=info
    )
    assert result["type"] == FlowResultType.FORM and result["step_id"] == "hassio_confirm", result
    result = await hass.config_entries.flow.async_configure(result["flow_id"], {})
    assert result["type"] == FlowResultType.CREATE_ENTRY, result
    await hass.async_block_till_done()
    entry = result["result"]
    assert entry.title == NAME
    assert entry.data == {"host": wis_server.host, "port": wis_server.port}
    assert entry.unique_id == info.uuid
    assert entry.state == config_entries.ConfigEntryState.LOADED
    assert sorted(entity_ids(hass, entry)) == ["stt", "tts", "wake_word"]
    assert wyoming_warnings(caplog) == []
