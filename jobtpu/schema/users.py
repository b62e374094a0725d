"""users.json, the home's list of user names (docs/reference/commands.md §2.15), as its msgspec type:
one key, `users`, each name a valid user name. Any fault is told as what the whole file must be."""

from typing import Annotated

from jobtpu.schema.msgspec_lib import Meta, msgspec
from jobtpu.schema.names import USER_NAME


class _Users(msgspec.Struct, forbid_unknown_fields=True):
    users: list[Annotated[str, Meta(pattern=USER_NAME.pattern)]]


UsersFile = Annotated[_Users, Meta(description='must be an object {"users": [names]}, each name 1–32 of a-z, '
                                               "0-9, '_' or '-', starting with a letter or '_'")]
