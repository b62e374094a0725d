"""The sheet memo (the sheet's memo file in the home): what jobtpu last wrote into the team's
sheet and what it last read there, as its type (docs/reference/machines-json.md §3.8)."""

from jobtpu.schema.msgspec_lib import msgspec


class Memo(msgspec.Struct):
    """What jobtpu last wrote (user and note cells) and the machines taken off the sheet."""

    users: dict[str, str] = {}
    notes: dict[str, str] = {}
    unregistered: set[str] = set()
    # The hand claims the last good read saw: they still hold while the API cannot be read.
    claims: dict[str, str] = {}
    # When the sheet was last read (epoch seconds), and the digest of the rows the sheet was last
    # brought to: a pass whose rows have that digest, within read_every of the read, skips the API.
    read_at: float = 0.0
    written: str = ""
    read_of: str = ""  # the worksheet that read was of: the claims of another sheet are no claims here
    # User cells a write was sent with but never known to have landed (no answer in time, or the
    # process killed meanwhile): recorded before the write is sent, so a cell holding one of them is
    # jobtpu's, not a claim, and the next write brings it to what it should be (docs/design.md).
    pending: dict[str, str] = {}

    def copy(self) -> "Memo":
        return Memo(dict(self.users), dict(self.notes), set(self.unregistered), dict(self.claims), self.read_at,
                    self.written, self.read_of, dict(self.pending))

    def mine(self, name: str, holder: str) -> bool:
        """Whether jobtpu wrote (or may have written) `holder` into the machine's user cell."""
        return holder == self.users.get(name, "") or holder == self.pending.get(name)

    def to_bytes(self) -> bytes:
        """The memo's keys in sorted order, `unregistered` sorted, `pending` only when a write is in
        doubt (an idle memo has none), one key a line."""
        doc = msgspec.to_builtins(self, order="sorted")
        if not self.pending:
            del doc["pending"]
        return msgspec.json.format(msgspec.json.encode(doc), indent=1) + b"\n"

    @classmethod
    def from_bytes(cls, data: bytes) -> "Memo":
        """The memo `data` holds; a damaged one (a crash, a hand edit, a wrong type anywhere) reads
        as `Memo()`, an empty memory."""
        try:
            return _DECODER.decode(data)
        except (msgspec.DecodeError, RecursionError):
            return Memo()


_DECODER = msgspec.json.Decoder(Memo)
