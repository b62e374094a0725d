"""The home folder: its paths, state.json's store, safe file access, users, settings, trust."""
