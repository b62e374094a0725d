"""A Slurm cluster as a machine (kind `slurm`): the sbatch options of a job, and the scripts that
submit, watch and stop its workers at the cluster's login host (docs/reference/machines-json.md)."""
