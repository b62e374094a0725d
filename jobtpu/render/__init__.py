"""Pure text and tables: printable text, column fitting, short names, a table drawn a string a row,
the styles of statuses (the core layer, docs/design.md §5.1)."""
