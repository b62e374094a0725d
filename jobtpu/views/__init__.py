"""What people see: tables, columns, status rows, goodput reports, safe text."""
