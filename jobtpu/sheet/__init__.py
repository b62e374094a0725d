"""The team's TPU spreadsheet: its API, how a tab is laid out, and its part in a pass."""
