"""``ledgerq config``: the effective settings, where each came from, secrets masked.

It reads and validates the settings like every other command (a bad value is
the same one line and exit 78) and connects to nothing, so it answers "what
would a command use here?" even while the services are down. The work itself
is :func:`ledgerq.admin.config`.
"""

from __future__ import annotations

import click
from rich.console import Console

from ledgerq import admin
from ledgerq.cli.group import emit, json_option, pass_settings
from ledgerq.core.config import Settings


@click.command("config")
@json_option
@pass_settings
def config(settings: Settings, as_json: bool) -> None:
    """The effective settings, where each came from, with secrets masked."""
    data = {name: entry.to_json() for name, entry in admin.config(settings).items()}

    def render(console: Console) -> None:
        # One line per setting, as environment assignments a person can copy.
        for row in data.values():
            raw = row["value"]
            value = "" if raw is None else ",".join(raw) if isinstance(raw, list) else str(raw)
            source = "default" if row["source"] == "default" else f"set by {row['source']}"
            if row["flag"] and row["source"] != row["flag"]:
                source += f"; flag {row['flag']}"
            console.print(
                f"{row['env']}={value}  # {source}", highlight=False, markup=False, soft_wrap=True
            )

    emit(data, as_json, render)
