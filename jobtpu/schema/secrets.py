"""secrets.json, the secret --env values kept out of state.json (docs/reference/job-environment.md §8.2.1), as its msgspec
type: {"<job id>": {"NAME": "value"}}. Any fault is told as what the whole file must be."""

from typing import Annotated

from jobtpu.schema.msgspec_lib import Meta

JobIdKey = Annotated[str, Meta(pattern=r"^[0-9]{1,18}$")]
Secrets = dict[str, dict[str, str]]
SecretsFile = Annotated[dict[JobIdKey, dict[str, str]], Meta(
    description="must map job ids to objects of NAME: value strings")]
