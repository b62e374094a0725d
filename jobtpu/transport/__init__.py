"""How jobtpu reaches a machine: the local one through subprocess, remote ones through SSH."""
