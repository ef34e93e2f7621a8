"""A command group whose commands are imported when they are run, not at start.

Each ``ledgerq`` process runs one command, yet importing every command module up
front costs every process the import of nearly the whole package: the benchmark
and its peers, the demo, the composition root with the broker client, Alembic.
:class:`LazyGroup` holds each command as a :class:`LazyCommand` (its name, the
module that defines it, and the first sentence of its help) and imports the
module only when click asks for that command: to run it, to print its own
``--help``, or to complete its arguments.

A mistyped command is matched against every command's name ("Did you mean
'stats'?"), loaded or not. The group's ``--help`` lists every command without
importing any: each row is
built from the summary here, through click's own formatting (the first sentence,
cut to the terminal's width), so the listing is the one the loaded commands
would print. A summary that drifts from its command's help is caught by
tests/unit/test_startup_imports.py, which compares the two listings at several
widths.

A command loaded once stays registered (``group.commands``); the summaries are
not used for it again.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import click


@dataclass(frozen=True)
class LazyCommand:
    """Command ``name``, the attribute of that name in ``module``; ``summary`` is
    the first sentence of its help."""

    name: str
    module: str
    summary: str

    def load(self) -> click.Command:
        command = getattr(importlib.import_module(self.module), self.name)
        if not isinstance(command, click.Command) or command.name != self.name:
            raise TypeError(f"{self.module}.{self.name} is not the command `{self.name}`")
        return command

    def placeholder(self) -> click.Command:
        """What the group's help lists in its place: the summary as its help."""
        return click.Command(self.name, help=self.summary)


class LazyGroup(click.Group):
    """A click group with commands registered by :meth:`add_lazy` as well as the
    usual ``add_command``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, LazyCommand] = {}

    def add_lazy(self, commands: Iterable[LazyCommand]) -> None:
        for command in commands:
            self.lazy[command.name] = command

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            self.add_command(self.lazy[cmd_name].load())
        return super().get_command(ctx, cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """Click's, but a name no command has is matched against every command's
        name for "Did you mean" (click's own looks at the loaded ones)."""
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as exc:
            raise click.exceptions.NoSuchCommand(
                exc.command_name, possibilities=self.list_commands(ctx), ctx=ctx
            ) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands' listing, without importing the ones not loaded yet."""
        listed = {name: lazy.placeholder() for name, lazy in self.lazy.items()}
        listed.update(self.commands)
        click.Group(self.name, commands=listed).format_commands(ctx, formatter)
