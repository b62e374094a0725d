"""`--retry-on-exit CODES`: the exit codes a job's own failure is retried on (docs/reference/commands.md
§2.2.3), a list of codes and ranges such as `42,127-255`. Pure: parsed once at submit, kept in the job's
record as written here (`normal`), and matched by the rules when an attempt exits (decide/rules.py)."""

LOWEST, HIGHEST = 1, 255  # an exit status is 0 to 255, and 0 is success: never a failure to retry


def parse(text: str) -> tuple[tuple[int, int], ...]:
    """`42,127-255` → ((42, 42), (127, 255)); a ValueError saying what is wrong in one line otherwise."""
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        word = part.strip()
        low, dash, high = word.partition("-")
        if not word or not low.strip().isdigit() or (dash and not high.strip().isdigit()):
            raise ValueError(f"--retry-on-exit {text!r}: {word!r} is not an exit code or a range of them "
                             f"(give codes and ranges like 42,127-255)")
        first, last = int(low), int(high) if dash else int(low)
        if first > last:
            raise ValueError(f"--retry-on-exit {text!r}: the range {word} runs backwards (write it {last}-{first})")
        if first < LOWEST or last > HIGHEST:
            raise ValueError(f"--retry-on-exit {text!r}: {word} is not an exit code a job can fail with "
                             f"(they are {LOWEST} to {HIGHEST})")
        ranges.append((first, last))
    return tuple(ranges)


def normal(text: str) -> str:
    """The list as the record keeps it: its codes and ranges as given, without spaces."""
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in parse(text))


def listed(text: str | None, code: int | None) -> bool:
    """Whether exit code `code` is one `text` names; no list (None) names every non-zero code."""
    if code is None or code == 0:
        return False
    if text is None:
        return True
    return any(a <= code <= b for a, b in parse(text))
