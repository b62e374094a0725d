"""The old tool's bare words among a submit's overrides (`run v3-32-p1 xibo lr=0.01`): a word that
names a machine becomes --machine, one that names a user --user (docs/reference/commands.md §2.2.10;
oldshapes.place_bare_words decides, purely)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobtpu.commands.submit_options import SubmitOptions
    from jobtpu.home.layout import Home


def with_bare_words(home: Home, opts: SubmitOptions) -> SubmitOptions:
    """`run v3-32-p1 xibo lr=0.01`: the options with the old tool's bare words among the overrides
    given as --machine and --user (docs/reference/commands.md §2.2.10)."""
    if all("=" in word for word in opts.overrides):
        return opts
    from jobtpu.fleet.drivers import driver_for
    from jobtpu.home.actor import resolve_user
    from jobtpu.home.machines import load_fleet
    from jobtpu.home.users import load_users
    from jobtpu.oldshapes import place_bare_words

    fleet = load_fleet(home)
    machines = {name: name for name in fleet.machines}
    for each in fleet.machines.values():  # what fleet.resolve takes, but a node's full path
        machines.update({alias: each.name for alias in each.aliases})
        for other in driver_for(each).other_names(each):  # a TPU's node
            machines.setdefault(other, each.name)
    users = load_users(home)  # without a list, the one user known is the one you act as
    machine, user, rest = place_bare_words(opts.overrides, machines, users or [resolve_user(opts.user)],
                                           opts.machine, opts.user)
    return opts._replace(machine=machine, user=user, overrides=rest)
