"""msgspec, as every jobtpu module takes it: loaded here, the first time, without typing_extensions.

msgspec imports typing_extensions whenever it is installed (the TPU client's grpcio installs it) for
two things the typing of Python 3.11 and later holds the same of: `get_type_hints`, which asked with
`include_extras=True` (as msgspec asks) returns typing's answer unchanged, and `Required` and
`NotRequired`, the very objects typing has. Importing it costs about 8 ms (inspect, ast, dis and
tokenize come with it), a tenth of a submit (docs/design.md §9.2). Loaded while that name is marked
absent, msgspec takes typing's, so it decodes exactly as before. A process that has already loaded
typing_extensions (the TPU client, a test), or runs another thread that might import it meanwhile,
keeps msgspec's usual import.

tests/test_layers.py holds every other module to importing msgspec from here."""

import sys


def _load_without_typing_extensions() -> None:
    threading = sys.modules.get("threading")
    if "msgspec" in sys.modules or "typing_extensions" in sys.modules or (
            threading is not None and threading.active_count() > 1):  # another thread may import it meanwhile
        return
    sys.modules["typing_extensions"] = None  # type: ignore[assignment]  # `import` raises ImportError
    try:
        import msgspec  # noqa: F401
    finally:
        if "typing_extensions" in sys.modules and sys.modules["typing_extensions"] is None:
            del sys.modules["typing_extensions"]  # a later `import typing_extensions` finds the real one


_load_without_typing_extensions()

import msgspec  # noqa: E402
from msgspec import UNSET, Meta, Raw, Struct, UnsetType  # noqa: E402

__all__ = ["UNSET", "Meta", "Raw", "Struct", "UnsetType", "msgspec"]
