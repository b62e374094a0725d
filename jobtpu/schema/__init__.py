"""The typed content of the files jobtpu keeps (msgspec): state.json and machines.json."""
