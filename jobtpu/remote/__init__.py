"""What runs on a machine: the shell scripts, their output, and the work done through them."""
