"""jobtpu: run ML training jobs over SSH on TPU VMs, GPU boxes and the local machine, through preemptions."""
