"""What people see, built from the home's files: the job and machine rows, listings, reports, usage."""
