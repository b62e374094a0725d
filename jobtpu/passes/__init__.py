"""One manage pass: its steps, what commands share with it, and what it tells after."""
