"""A user's settings file (`users/<name>/settings.json`, docs/reference/commands.md §2.16) as its
msgspec type; home/settings.py reads, checks and writes it. Each key's description ends the sentence
"'key' ..." of the one line a wrong value gets (schema/decode.py)."""

from typing import Annotated, Any

from jobtpu.schema.msgspec_lib import Meta, msgspec


class UserSettings(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    rule: Annotated[str | None, Meta(description="must be a rule (pre, pass, reapply, rerun or resume), or null")] = None
    req: Annotated[list[str], Meta(description='must be a list of requests, like ["v3-16"]')] = []
    columns: Annotated[list[str], Meta(description="must be a list of status column names")] = []
    time_zone: Annotated[str | None, Meta(description="must be a time zone: an IANA name like Asia/Shanghai, UTC or local")] = None
    # "N" → an absolute folder
    dirs: Annotated[dict[str, str], Meta(description="must map working directory numbers to absolute folders")] = {}
    # short name → full config key
    aliases: Annotated[dict[str, str], Meta(description="must map alias names to config keys")] = {}
    # the user's own webhook destinations (notify.parse_destinations checks them)
    notify: Annotated[list[Any], Meta(description="must be a list of webhook destinations")] = []
    # how the team sheet's User cells name this user (the older tool's spreadsheet_name: `Lyy` for lyy)
    sheet_name: Annotated[str | None, Meta(description="must be the name the team sheet shows for you, or null")] = None
